package e2bsdk

// Issue 18: E2B's filesystem-only pause through the lifecycle, with the
// unmodified E2B SDK, on both backends. Written from E2B's documented
// behaviour (e2b@2.51 index.d.ts):
//
//   - lifecycle {onTimeout: {action: 'pause', keepMemory: false}} (the API's
//     autoPauseMemory false): "the auto-pause drops the in-memory state and
//     persists only the filesystem ...; resuming it cold-boots (reboots) the
//     sandbox from disk. Such a snapshot cannot be auto-resumed by traffic
//     and must be resumed explicitly, so it cannot be combined with
//     autoResume";
//   - Sandbox.connect(id, {onResume: 'reboot'}) (the API's connect with
//     memory false): "cold-boots from disk state" a sandbox paused with its
//     memory; "a no-op for a snapshot without memory or a sandbox that is
//     already running".
//
// A cold boot shows as: the file written before is there, the background
// process is gone, and the boot is new (gvisor: a new kernel, so a new
// boot id; native shares the host's kernel and boot id, so PID 1's start
// time tells).

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const coldLifecycleScript = `
import { Sandbox } from 'e2b'

const probe = 'cat /proc/sys/kernel/random/boot_id; cut -d" " -f22 /proc/1/stat; n=0; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && n=$((n+1)); done; echo $n; cat /home/user/kept.txt'
const look = async (s) => (await s.commands.run(probe)).stdout.trim().split('\n')
// A new boot: the boot id (gvisor) or PID 1's start time (native) changed.
const newBoot = (a, b) => a[0] !== b[0] || a[1] !== b[1]
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// 1. Paused without its memory at its timeout; connect boots it again.
const a = await Sandbox.create('base', { timeoutMs: 5_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
try {
  await a.files.write('/home/user/kept.txt', 'kept A')
  await a.commands.run('sleep 600', { background: true })
  const before = await look(a)
  console.log('A BEFORE', JSON.stringify(before))
  let st = ''
  for (let i = 0; i < 120 && st !== 'paused'; i++) {
    await sleep(500)
    st = (await Sandbox.getInfo(a.sandboxId)).state
  }
  console.log('A AUTOPAUSED', st)
  const again = await Sandbox.connect(a.sandboxId)
  console.log('A RESUMED', (await again.getInfo()).state)
  const after = await look(again)
  console.log('A AFTER', JSON.stringify(after))
  console.log('A COLD', after[3], after[2], newBoot(before, after))
} finally {
  await a.kill()
}

// 2. The API refuses autoResume with autoPauseMemory false, as E2B does
// (the SDK refuses it before sending).
const res = await fetch(process.env.E2B_API_URL + '/sandboxes', {
  method: 'POST', headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
  body: JSON.stringify({ templateID: 'base', timeout: 60, autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } }) })
console.log('REFUSED', res.status)
if (res.status === 201) await Sandbox.kill((await res.json()).sandboxID)

// 3. Paused with its memory; connect with onResume 'reboot' boots it
// again on its files; a second such connect to the running sandbox is a
// no-op.
const b = await Sandbox.create('base', { timeoutMs: 120_000 })
try {
  await b.files.write('/home/user/kept.txt', 'kept B')
  await b.commands.run('sleep 600', { background: true })
  const before = await look(b)
  console.log('B BEFORE', JSON.stringify(before))
  console.log('B PAUSED', await b.pause(), (await b.getInfo()).state)
  const again = await Sandbox.connect(b.sandboxId, { onResume: 'reboot' })
  console.log('B RESUMED', (await again.getInfo()).state)
  const after = await look(again)
  console.log('B AFTER', JSON.stringify(after))
  console.log('B COLD', after[3], after[2], newBoot(before, after))
  await again.commands.run('sleep 600', { background: true })
  const running = await Sandbox.connect(b.sandboxId, { onResume: 'reboot' })
  const still = await look(running)
  console.log('B NOOP', still[2], newBoot(after, still))
} finally {
  await b.kill()
}
`

// TestE2BColdLifecycle runs coldLifecycleScript against wardend with each
// backend.
func TestE2BColdLifecycle(t *testing.T) {
	work, node := sdkWork(t, "coldlc")
	if err := os.WriteFile(filepath.Join(work, "coldlc.mjs"), []byte(coldLifecycleScript), 0o644); err != nil {
		t.Fatal(err)
	}
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
			cmd := exec.CommandContext(sctx, node, "coldlc.mjs")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work,
				"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + key}
			out, err := cmd.CombinedOutput()
			t.Logf("node coldlc.mjs (%s):\n%s", backend, out)
			if err != nil {
				t.Fatalf("the E2B SDK script failed: %v", err)
			}
			for _, w := range []string{
				"A AUTOPAUSED paused",
				"A RESUMED running",
				"A COLD kept A 0 true", // the file kept, no sleep left, a new boot
				"REFUSED 400",
				"B PAUSED true paused",
				"B RESUMED running",
				"B COLD kept B 0 true",
				"B NOOP 1 false", // the running sandbox is left as it is
			} {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s: output lacks %q", backend, w)
				}
			}
		})
	}
}
