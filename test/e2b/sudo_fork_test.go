package e2bsdk

// Issue 18, sudo and E2B's fork route, through the unmodified E2B SDK on
// both backends. Written from E2B's documented behaviour: in E2B's
// templates `sudo cmd` run as the default user runs cmd as root without a
// password (E2B's docs: "the default user has sudo"), and Sandbox.fork
// answers 201 with one SandboxForkResult per fork, each a sandbox running
// what the source ran. Warden forks on gvisor only; native answers 409.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sudoForkScript = `
import { Sandbox } from 'e2b'

const backend = process.env.WARDEN_BACKEND
const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
try {
  // 1. sudo as E2B users use it
  const who = await sbx.commands.run('id -un; sudo id -un; sudo -n whoami; sudo -u user id -u; sudo -i pwd; sudo -E sh -c "echo \\$E18X"', { envs: { E18X: 'kept' } })
  console.log('SUDO', JSON.stringify(who.stdout))
  const w = await sbx.commands.run('sudo sh -c "echo root-wrote > /etc/s18-test" && stat -c %U /etc/s18-test')
  console.log('SUDOWRITE', JSON.stringify(w.stdout))
  try { await sbx.commands.run('sudo -k true') } catch (e) { console.log('SUDOBADFLAG', e.exitCode, e.stderr.includes("invalid option -- 'k'")) }
  try { await sbx.commands.run('sudo sh -c "exit 5"') } catch (e) { console.log('SUDOEXIT', e.exitCode) }

  // 3. fork
  await sbx.files.write('/home/user/before-fork.txt', 'source')
  if (backend === 'gvisor') {
    const forks = await sbx.fork({ count: 1, timeoutMs: 60_000 })
    const f = forks[0]
    const ok = f instanceof Sandbox
    const r = ok ? await f.commands.run('cat /home/user/before-fork.txt') : null
    const info = ok ? await f.getInfo() : null
    console.log('FORK', ok, r && JSON.stringify(r.stdout), info && info.metadata.forked_from === sbx.sandboxId, ok && f.sandboxId !== sbx.sandboxId)
    if (ok) await f.kill()
  } else {
    const res = await fetch(process.env.E2B_API_URL + '/sandboxes/' + sbx.sandboxId + '/fork', {
      method: 'POST', headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }, body: '{"count":1}' })
    const body = await res.json()
    console.log('FORK', res.status, body.code)
  }
  const missing = await fetch(process.env.E2B_API_URL + '/sandboxes/nosuchsandbox/fork', {
    method: 'POST', headers: { 'X-API-Key': process.env.E2B_API_KEY }, body: '{}' })
  console.log('FORKMISSING', missing.status)
} finally {
  await sbx.kill()
}
`

// TestE2BSudoAndFork runs sudoForkScript against wardend with each backend.
func TestE2BSudoAndFork(t *testing.T) {
	work, node := sdkWork(t, "s18")
	os.WriteFile(filepath.Join(work, "s18.mjs"), []byte(sudoForkScript), 0o644)

	for _, backend := range []string{"native", "gvisor"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "gvisor" {
				if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
					t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
				}
			}
			addr, key := startWardend(t, work, backend)
			sctx, scancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer scancel()
			cmd := exec.CommandContext(sctx, node, "s18.mjs")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "WARDEN_BACKEND=" + backend,
				"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + key}
			out, err := cmd.CombinedOutput()
			t.Logf("node s18.mjs (%s):\n%s", backend, out)
			if err != nil {
				t.Fatalf("the E2B SDK script failed: %v", err)
			}
			want := []string{
				`SUDO "user\nroot\nroot\n1000\n/root\nkept\n"`,
				`SUDOWRITE "root\n"`,
				"SUDOBADFLAG 1 true",
				"SUDOEXIT 5",
				"FORKMISSING 404",
			}
			if backend == "gvisor" {
				want = append(want, `FORK true "source" true true`)
			} else {
				want = append(want, "FORK 409 409")
			}
			for _, w := range want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s: output lacks %q", backend, w)
				}
			}
		})
	}
}
