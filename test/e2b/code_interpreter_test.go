package e2bsdk

// Issue 18, "Code interpreter", through the unmodified @e2b/code-interpreter
// SDK on both backends: each check is written from what E2B's Jupyter-based
// code-interpreter template returns (its server maps Jupyter's text/plain
// to text, dropping one enclosing pair of quotes; ipykernel batches a
// print into one stream message; IPython dedents cells and runs !cmd;
// matplotlib figures carry e2b/chart, DataFrames e2b/data; the python and
// javascript default contexts exist from the start; kernels run as root;
// the server listens on 49999 inside the sandbox).

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ciBehaviourScript = `
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create({ timeoutMs: 180_000 })
const j = (v) => JSON.stringify(v)
try {
  // contexts: the defaults are listed on a fresh sandbox, in creation order
  const fresh = await sbx.listCodeContexts()
  console.log('DEFAULTS', fresh.map(c => c.language + '@' + c.cwd).join(','))

  // text: the repr without the enclosing quotes
  let ex = await sbx.runCode("'hello'")
  console.log('TEXT', j(ex.text), j((await sbx.runCode("[1, 'a']")).text))

  // one print, one stdout message
  ex = await sbx.runCode('print("a", "b", 3)')
  console.log('PRINT', j(ex.logs.stdout))

  // indented cells, shell escapes
  ex = await sbx.runCode('    x = 20\n    x * 2 + 2')
  console.log('INDENT', ex.text)
  ex = await sbx.runCode('who = "shell"\n!echo hi $who && id -un')
  console.log('BANG', j(ex.logs.stdout.join('')))

  // display() and _repr_*_
  ex = await sbx.runCode('class H:\n    def _repr_html_(self):\n        return "<b>h</b>"\ndisplay(H())\nH()')
  console.log('DISPLAY', ex.results.length, ex.results.map(r => r.isMainResult + ':' + r.html).join(','))

  // PIL images shown or displayed come back as PNG
  ex = await sbx.runCode("from PIL import Image\nimg = Image.new('RGB', (3, 2))\nimg.show()\ndisplay(img)")
  console.log('PIL', ex.results.length, ex.results.every(r => Buffer.from(r.png || '', 'base64').subarray(1, 4).toString() === 'PNG'))

  // charts: structured data as well as the PNG
  const chart = async (code) => {
    const e = await sbx.runCode('import matplotlib.pyplot as plt\n' + code + '\nplt.show()')
    const r = e.results.find(r => r.chart)
    return r ? [r.chart, !!r.png] : [e.error && e.error.value, false]
  }
  let [c, png] = await chart("plt.plot([1, 2], [3, 4], label='l')\nplt.title('Line')\nplt.xlabel('t (s)')")
  console.log('LINE', c.type, c.title, c.x_label, c.x_unit, j(c.elements), png)
  ;[c, png] = await chart("plt.bar(['a', 'b'], [1, 2])")
  console.log('BAR', c.type, c.elements.map(e => e.label + '=' + e.value).join(','), png)
  ;[c, png] = await chart('plt.scatter([1, 2], [3, 4])')
  console.log('SCATTER', c.type, j(c.elements[0].points), png)
  ;[c, png] = await chart("plt.pie([1, 1], labels=['p', 'q'])")
  console.log('PIE', c.type, c.elements.map(e => e.label + ':' + e.angle).join(','), png)
  ;[c, png] = await chart("plt.boxplot([[1, 2, 3, 4, 5]], labels=['b'])")
  console.log('BOX', c.type, c.elements[0].label, c.elements[0].median, png)
  ;[c, png] = await chart("fig, (a, b) = plt.subplots(1, 2)\na.plot([1, 2])\nb.scatter([1], [2])")
  console.log('SUPER', c.type, c.elements.map(e => e.type).join(','), png)

  // DataFrames with data
  ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
  console.log('DATA', j(ex.results[0].data), ex.results[0].html.includes('<table'))

  // kernels run as root: a context whose cwd is under /root works
  const rootCtx = await sbx.createCodeContext({ language: 'python', cwd: '/root' })
  ex = await sbx.runCode('import os, getpass\n(getpass.getuser(), os.getcwd())', { context: rootCtx })
  console.log('ROOT', ex.text, ex.error && ex.error.value)

  // bash: per-run variables do not leak into later runs
  const sh = await sbx.createCodeContext({ language: 'bash' })
  ex = await sbx.runCode('echo "$CI18"', { context: sh, envs: { CI18: 'during' } })
  const during = ex.logs.stdout.join('')
  ex = await sbx.runCode('echo "${CI18-unset}"', { context: sh })
  console.log('BASHENV', j(during), j(ex.logs.stdout.join('')))

  // JavaScript: ESM import of an installed package; TypeScript as before
  await sbx.files.write('/home/user/node_modules/ci18-esm/package.json', j({ name: 'ci18-esm', type: 'module', exports: { '.': { import: './i.js' } } }))
  await sbx.files.write('/home/user/node_modules/ci18-esm/i.js', 'export const v = 41\n')
  ex = await sbx.runCode("import { v } from 'ci18-esm'\nimport path from 'node:path'\nv + 1 + path.sep", { language: 'js' })
  console.log('ESM', ex.text, ex.error && ex.error.value)
  ex = await sbx.runCode('const n: number = 6\nn * 7', { language: 'ts' })
  console.log('TS', ex.text)

  // the interpreter also listens on 49999 inside the sandbox
  const local = await sbx.commands.run("command -v pgrep >/dev/null && echo pgrep; curl -s localhost:49999/health; echo; curl -s -X POST -H 'Content-Type: application/json' -d '{\"code\":\"6*7\"}' localhost:49999/execute | grep -o '\"text\":\"42\"'")
  console.log('LOCAL', j(local.stdout))
} finally {
  await sbx.kill()
}
`

// TestE2BCodeInterpreterBehaviour runs ciBehaviourScript against wardend
// with each backend.
func TestE2BCodeInterpreterBehaviour(t *testing.T) {
	work, node := sdkWork(t, "ci", "e2b@"+SDKVersion, "@e2b/code-interpreter@"+CodeInterpreterVersion)
	os.WriteFile(filepath.Join(work, "ci.mjs"), []byte(ciBehaviourScript), 0o644)

	for _, backend := range []string{"native", "gvisor"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "gvisor" {
				if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
					t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
				}
			}
			addr, key := startWardend(t, work, backend)
			sctx, scancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer scancel()
			cmd := exec.CommandContext(sctx, node, "ci.mjs")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work,
				"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + key}
			out, err := cmd.CombinedOutput()
			t.Logf("node ci.mjs (%s):\n%s", backend, out)
			if err != nil {
				t.Fatalf("the code-interpreter SDK script failed: %v", err)
			}
			for _, want := range []string{
				"DEFAULTS python@/home/user,javascript@/home/user",
				`TEXT "hello" "[1, 'a']"`,
				`PRINT ["a b 3\n"]`,
				"INDENT 42",
				`BANG "hi shell\nroot\n"`,
				"DISPLAY 2 false:<b>h</b>,true:<b>h</b>",
				"PIL 2 true",
				`LINE line Line t (s) s [{"label":"l","points":[[1,3],[2,4]]}] true`,
				"BAR bar a=1,b=2 true",
				"SCATTER scatter [[1,3],[2,4]] true",
				"PIE pie p:180,q:180 true",
				"BOX box_and_whisker b 3 true",
				"SUPER superchart line,scatter true",
				`DATA {"a":[1,2],"b":["x","y"]} true`,
				"ROOT ('root', '/root') undefined",
				`BASHENV "during\n" "unset\n"`,
				"ESM 42/ undefined",
				"TS 42",
				`LOCAL "pgrep\n\"OK\"\n\"text\":\"42\"\n"`,
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s: output lacks %q", backend, want)
				}
			}
		})
	}
}
