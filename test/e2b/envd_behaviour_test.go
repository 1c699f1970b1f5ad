package e2bsdk

// Issue 18, envd behaviours, through the unmodified E2B SDK on both
// backends: each check is written from envd's documented or observed
// behaviour (E2B's docs show watchDir waiting for WRITE after files.write;
// envd writes uploads in place, makes missing parents as root and hands them
// to the user, removes with os.RemoveAll, reports symlink targets resolved
// and absolute, and its API filters metrics by start and end).

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const envdScript = `
import { Sandbox, FilesystemEventType } from 'e2b'

const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
const wait = async (cond) => { for (let i = 0; i < 100 && !cond(); i++) await new Promise(r => setTimeout(r, 50)) ; return cond() }
try {
  // 1. files.write produces WRITE for a watcher (new file, then overwrite)
  await sbx.files.makeDir('/home/user/wd')
  const evs = []
  const h = await sbx.files.watchDir('/home/user/wd', e => evs.push(e.type + ':' + e.name))
  await sbx.files.write('/home/user/wd/f.txt', 'one')
  const first = await wait(() => evs.includes(FilesystemEventType.WRITE + ':f.txt'))
  const n = evs.length
  await sbx.files.write('/home/user/wd/f.txt', 'two')
  const second = await wait(() => evs.slice(n).includes(FilesystemEventType.WRITE + ':f.txt'))
  await h.stop()
  console.log('WATCHWRITE', first, second, JSON.stringify(evs))

  // 2. parents that do not exist, in a directory the user may not write
  const up = await sbx.files.write('/e18-root-owned/deep/er/f.txt', 'p')
  const own = await sbx.commands.run('stat -c %U /e18-root-owned /e18-root-owned/deep /e18-root-owned/deep/er/f.txt; stat -c %U /')
  console.log('PARENTS', up.path, JSON.stringify(own.stdout), JSON.stringify(await sbx.files.read('/e18-root-owned/deep/er/f.txt')))

  // 3. removing a path that does not exist succeeds
  try { await sbx.files.remove('/home/user/never-existed'); console.log('REMOVEMISSING ok') } catch (e) { console.log('REMOVEMISSING', e.constructor.name, e.message) }

  // 4. a symlink's entry names its resolved absolute target
  await sbx.commands.run('mkdir -p /home/user/ld && echo s > /home/user/ld/t.txt && ln -s ld/t.txt /home/user/rel-link && ln -s rel-link /home/user/chain-link')
  const li = await sbx.files.getInfo('/home/user/rel-link')
  const ch = (await sbx.files.list('/home/user')).find(e => e.name === 'chain-link')
  console.log('SYMLINK', li.type, li.symlinkTarget, ch && ch.symlinkTarget)

  // 5. metrics honour start and end
  const hour = 3600_000, now = Date.now()
  const before = await Sandbox.getMetrics(sbx.sandboxId, { start: new Date(now - 2 * hour), end: new Date(now - hour) })
  const current = await sbx.getMetrics({ start: new Date(now - 60_000) })
  console.log('METRICS', before.length, current.length)
} finally {
  await sbx.kill()
}
`

// TestE2BEnvdBehaviour runs envdScript against wardend with each backend.
func TestE2BEnvdBehaviour(t *testing.T) {
	work, node := sdkWork(t, "envd")
	os.WriteFile(filepath.Join(work, "envd.mjs"), []byte(envdScript), 0o644)

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
			cmd := exec.CommandContext(sctx, node, "envd.mjs")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work,
				"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + key}
			out, err := cmd.CombinedOutput()
			t.Logf("node envd.mjs (%s):\n%s", backend, out)
			if err != nil {
				t.Fatalf("the E2B SDK script failed: %v", err)
			}
			for _, want := range []string{
				"WATCHWRITE true true",
				`PARENTS /e18-root-owned/deep/er/f.txt "user\nuser\nuser\nroot\n" "p"`,
				"REMOVEMISSING ok",
				"SYMLINK symlink /home/user/ld/t.txt /home/user/ld/t.txt",
				"METRICS 0 1",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s: output lacks %q", backend, want)
				}
			}
		})
	}
}

// startWardend runs a wardend with the given default backend and an E2B
// listener until the test ends; it returns the listener's address and the
// admin key.
func startWardend(t *testing.T, work, backend string) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp(work, backend+"-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	bin := filepath.Join(work, "bin")
	state, run := filepath.Join(dir, "state"), filepath.Join(dir, "run")
	apiAddr, e2bAddr := freePort(t), freePort(t)
	var log bytes.Buffer
	d := exec.Command(filepath.Join(bin, "wardend"), "--listen", apiAddr, "--socket", filepath.Join(run, "wardend.sock"),
		"--state-dir", state, "--run-dir", run, "--agent", filepath.Join(bin, "warden-agent"), "--pool-size", "0",
		"--e2b-listen", e2bAddr, "--backend", backend)
	d.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			d.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("wardend (%s) log:\n%s", backend, log.String())
		}
		unmountUnder(dir) // before the work directory is removed
	})
	waitE2B(t, e2bAddr, &log)
	key, err := os.ReadFile(filepath.Join(state, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	return e2bAddr, strings.TrimSpace(string(key))
}

// unmountUnder detaches every mount left under dir (runsc keeps its
// null network namespace on purpose; a sandbox's mounts if the daemon
// could not clean up), so removing dir cannot reach through a mount.
func unmountUnder(dir string) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	lines := strings.Split(string(raw), "\n")
	for i := len(lines) - 1; i >= 0; i-- { // deepest (latest) first
		if f := strings.Fields(lines[i]); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			unix.Unmount(f[4], unix.MNT_DETACH)
		}
	}
}
