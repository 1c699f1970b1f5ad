package e2bsdk

// Issue 18: E2B's filesystem-only pause, sbx.pause({ keepMemory: false }),
// through the unmodified E2B SDK. Written from E2B's documented behaviour
// (e2b@2.51 index.d.ts: "When opts.keepMemory is false, the in-memory
// state is dropped" and the sandbox is cold-booted from its filesystem on
// resume): after pause and connect, files are kept, processes are gone and
// the sandbox booted again. On gvisor the new kernel has a new boot id; on
// native the boot id is the host's (the sandbox shares the host kernel),
// so the new boot shows as PID 1's start time.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const coldPauseScript = `
import { Sandbox } from 'e2b'

const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
try {
  await sbx.files.write('/home/user/kept.txt', 'kept across a cold boot')
  const bg = await sbx.commands.run('sleep 600', { background: true })
  const before = (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id; cut -d" " -f22 /proc/1/stat; pgrep -x sleep | wc -l')).stdout.trim().split('\n')
  {
    console.log('COLDPAUSE', await sbx.pause({ keepMemory: false }), (await sbx.getInfo()).state)
    console.log('AGAIN', await sbx.pause({ keepMemory: false }))
    const again = await Sandbox.connect(sbx.sandboxId)
    console.log('RESUMED', (await again.getInfo()).state)
    console.log('FILE', JSON.stringify(await again.files.read('/home/user/kept.txt')))
    const after = (await again.commands.run('cat /proc/sys/kernel/random/boot_id; cut -d" " -f22 /proc/1/stat; pgrep -x sleep | wc -l; [ \"$(cat /proc/' + bg.pid + '/comm 2>/dev/null)\" = sleep ] && echo alive || echo gone')).stdout.trim().split('\n')
    console.log('BEFORE', JSON.stringify(before))
    console.log('AFTER', JSON.stringify(after))
    console.log('PROCS', before[2], after[2], after[3])
    console.log('NEWBOOT', after[0] !== before[0] || after[1] !== before[1])
    console.log('BOOTID', after[0] !== before[0] ? 'changed' : 'same')
    const w = await again.commands.run('echo works')
    console.log('EXEC', JSON.stringify(w.stdout))
  }
} finally {
  await sbx.kill()
}
`

// TestE2BColdPause runs coldPauseScript against wardend with each backend.
func TestE2BColdPause(t *testing.T) {
	work, node := sdkWork(t, "cold")
	os.WriteFile(filepath.Join(work, "cold.mjs"), []byte(coldPauseScript), 0o644)

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
			cmd := exec.CommandContext(sctx, node, "cold.mjs")
			cmd.Dir = work
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "WARDEN_BACKEND=" + backend,
				"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + key}
			out, err := cmd.CombinedOutput()
			t.Logf("node cold.mjs (%s):\n%s", backend, out)
			if err != nil {
				t.Fatalf("the E2B SDK script failed: %v", err)
			}
			want := []string{
				"COLDPAUSE true paused",
				"AGAIN false",
				"RESUMED running",
				`FILE "kept across a cold boot"`,
				"PROCS 1 0 gone", // the background sleep is gone
				"NEWBOOT true",   // a new kernel, or on native a new PID 1
				`EXEC "works\n"`,
			}
			// gvisor boots a new kernel; the boot id on native is the host
			// kernel's and so does not change.
			if backend == "gvisor" {
				want = append(want, "BOOTID changed")
			} else {
				want = append(want, "BOOTID same")
			}
			for _, w := range want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s: output lacks %q", backend, w)
				}
			}
		})
	}
}
