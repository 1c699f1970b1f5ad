package e2bsdk

// Issue 18, "R and Java kernels, as E2B's template has", through the
// unmodified @e2b/code-interpreter SDK on both backends. Written from what
// E2B's template returns: IRkernel displays a value in R's printed form
// (`x <- 1+1; x` gives a result whose text is "[1] 2", as E2B's own tests
// check with results[0].text), IJava shows the last expression's value with
// String.valueOf (`"hello"` reads hello), stdout streams, errors carry a
// name and value, state persists in a context, and runCode's `envs` apply
// to one run. R and Java come from the host's /usr (scripts/install-deps.sh
// installs r-base-core and default-jdk-headless); missing, these tests fail.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ciRJavaScript = `
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create({ timeoutMs: 600_000 })
const j = (v) => JSON.stringify(v)
// The first run of a language starts its interpreter (a JVM compiling its
// driver, on a loaded machine): generous request timeouts.
const slow = { requestTimeoutMs: 240_000, timeoutMs: 240_000 }
try {
  // R
  let ex = await sbx.runCode('x <- 1+1; x', { language: 'r', ...slow })
  console.log('R', j(ex.results.map(r => r.text)), j(ex.error))
  ex = await sbx.runCode('cat("hi\\n"); x + 40', { language: 'r' })
  console.log('RSTATE', j(ex.logs.stdout.join('')), j(ex.results.map(r => r.text)))
  ex = await sbx.runCode("data.frame(a = c(1, 2), b = c('x', 'y'))", { language: 'r' })
  console.log('RDF', j(ex.results[0]?.text), String(ex.results[0]?.html).includes('<td>y</td>'))
  ex = await sbx.runCode('f <- function() stop("boom"); f()', { language: 'r' })
  console.log('RERR', ex.error?.name, ex.error?.value)
  ex = await sbx.runCode('Sys.getenv("CI18R")', { language: 'r', envs: { CI18R: 'during' } })
  console.log('RENV', j(ex.results[0]?.text), j((await sbx.runCode('Sys.getenv("CI18R", "unset")', { language: 'r' })).results[0]?.text))
  ex = await sbx.runCode('plot(1:3)', { language: 'r' })
  console.log('RPLOT', ex.results.length, (ex.results[0]?.png || '').startsWith('iVBOR'))
  const rctx = await sbx.createCodeContext({ language: 'r', ...slow })
  ex = await sbx.runCode('exists("x")', { context: rctx, ...slow })
  console.log('RCTX', rctx.language, j(ex.results[0]?.text))
  await sbx.removeCodeContext(rctx) // its memory: a JVM is next, in a 512 MiB sandbox

  // Java
  ex = await sbx.runCode('int x = 1 + 1;', { language: 'java', ...slow })
  console.log('JDECL', ex.results.length, j(ex.error))
  ex = await sbx.runCode('System.out.println("Hello, World!");\nx', { language: 'java' })
  console.log('JAVA', j(ex.logs.stdout), j(ex.text), j(ex.results[0]?.text))
  ex = await sbx.runCode('"hello"', { language: 'java' })
  console.log('JSTR', j(ex.text))
  ex = await sbx.runCode('Integer.parseInt("zz")', { language: 'java' })
  console.log('JERR', ex.error?.name, j(ex.error?.value))
  ex = await sbx.runCode('System.getenv("CI18J")', { language: 'java', envs: { CI18J: 'during' } })
  console.log('JENV', j(ex.text), (await sbx.runCode('System.getenv("CI18J")', { language: 'java' })).results.length)

  const langs = (await sbx.listCodeContexts()).map(c => c.language)
  console.log('LANGS', ['r', 'java'].every(l => langs.includes(l)))
} finally {
  await sbx.kill()
}
`

// TestE2BCodeInterpreterRJava runs ciRJavaScript against wardend with each
// backend.
func TestE2BCodeInterpreterRJava(t *testing.T) {
	for _, bin := range []string{"Rscript", "java", "javac"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed (scripts/install-deps.sh installs r-base-core and default-jdk-headless): %v", bin, err)
		}
	}
	work, node := sdkWork(t, "cirj", "e2b@"+SDKVersion, "@e2b/code-interpreter@"+CodeInterpreterVersion)
	os.WriteFile(filepath.Join(work, "cirj.mjs"), []byte(ciRJavaScript), 0o644)

	for _, backend := range []string{"native", "gvisor"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "gvisor" {
				if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
					t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
				}
			}
			addr, key := startWardend(t, work, backend)
			sctx, scancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer scancel()
			cmd := exec.CommandContext(sctx, node, "cirj.mjs")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work,
				"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + key}
			out, err := cmd.CombinedOutput()
			t.Logf("node cirj.mjs (%s):\n%s", backend, out)
			if err != nil {
				t.Fatalf("the code-interpreter SDK script failed: %v", err)
			}
			for _, want := range []string{
				`R ["[1] 2"] undefined`,
				`RSTATE "hi\n" ["[1] 42"]`,
				`RDF "  a b\n1 1 x\n2 2 y" true`,
				"RERR ERROR boom",
				`RENV "[1] \"during\"" "[1] \"unset\""`,
				"RPLOT 1 true",
				`RCTX r "[1] FALSE"`,
				"JDECL 0 undefined",
				`JAVA ["Hello, World!\n"] "2" "2"`,
				`JSTR "hello"`,
				`JERR java.lang.NumberFormatException "For input string: \"zz\""`,
				`JENV "during" 0`,
				"LANGS true",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s: output lacks %q", backend, want)
				}
			}
		})
	}
}
