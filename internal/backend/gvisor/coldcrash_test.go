package gvisor_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
)

// TestColdStopCrash leaves a sandbox where a daemon that died in the middle
// of StopKeep (E2B's filesystem-only pause, coldrestart.go) leaves it, by
// running its steps with runsc here, and checks what a restarted daemon
// (a new backend's Recover) makes of it:
//
//   - killed while the filesystem checkpoint was being written (the
//     pausing marker, the kernel paused by runsc pause, the image in
//     <id>.new): the stop is undone, the sandbox runs with its process
//     and files, no partial image or marker is left;
//   - killed once the image was renamed into place, before the handle said
//     so and the kernel was killed: the stop is finished, the sandbox is
//     stopped with nothing of it running, and Restart boots it on its
//     files.
//
// Either way a Delete leaves nothing.
func TestColdStopCrash(t *testing.T) {
	for _, tc := range []struct {
		name    string
		renamed bool
	}{{"mid-checkpoint", false}, {"before-record", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := newBackend(t)
			f := backendtest.Factory{New: newBackend, Spec: baseSpec}
			s := backendtest.Start(t, f, b, nil)
			s.Sh(t, "", "echo kept > /home/user/cold; (sleep 7777 >/dev/null 2>&1 &); sleep 0.2")
			id := s.H.ID
			dir := filepath.Join(runDir, id)
			img := filepath.Join(runDir, "checkpoints", id)
			runscCmd := func(args ...string) {
				t.Helper()
				out, err := exec.Command("runsc", append([]string{"--root=" + filepath.Join(runDir, ".runsc")}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("runsc %v: %v\n%s", args, err, out)
				}
			}
			// The steps StopKeep had taken when the daemon died.
			if err := os.WriteFile(filepath.Join(dir, "pausing"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			runscCmd("pause", id)
			tmp := img + ".new"
			if err := os.MkdirAll(tmp, 0o700); err != nil {
				t.Fatal(err)
			}
			runscCmd("fscheckpoint", "--leave-running", "--image-path="+tmp, id)
			if tc.renamed {
				raw, err := os.ReadFile(filepath.Join(dir, "spec.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tmp, "spec.json"), raw, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, img); err != nil {
					t.Fatal(err)
				}
			}
			s.Client.Close()

			// The restarted daemon.
			b2 := newBackend(t)
			if err := b2.Recover(ctx, s.H); err != nil {
				t.Fatalf("recover: %v", err)
			}
			t.Cleanup(func() { b2.Delete(context.Background(), s.H) })
			for _, p := range []string{tmp, filepath.Join(dir, "pausing")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s left after recovery", p)
				}
			}
			h := s.H
			if tc.renamed {
				if st, err := b2.Status(ctx, s.H); err != nil || st != backend.StateStopped {
					t.Fatalf("status = %q, %v; want stopped (the stop finished)", st, err)
				}
				if procs := sandboxProcs(id); len(procs) > 0 {
					t.Fatalf("processes of a stopped sandbox: %v", procs)
				}
				var err error
				if h, err = b2.(backend.Restarter).Restart(ctx, s.H); err != nil {
					t.Fatalf("restart: %v", err)
				}
				if _, err := os.Stat(img); err == nil {
					t.Errorf("the filesystem checkpoint is left after the restart")
				}
			} else if st, err := b2.Status(ctx, s.H); err != nil || st != backend.StateRunning {
				t.Fatalf("status = %q, %v; want running (the stop undone)", st, err)
			}
			c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b2.DialAgent(ctx, h) })
			defer c.Close()
			s2 := &backendtest.Sandbox{B: b2, H: h, Client: c}
			want := "kept\n1\n" // the file, and the sleep still running
			if tc.renamed {
				want = "kept\n0\n" // a new boot: the sleep is gone
			}
			if got := s2.Sh(t, "", `cat /home/user/cold; n=0; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && n=$((n+1)); done; echo $n`); got != want {
				t.Fatalf("after recovery: %q, want %q", got, want)
			}
			if err := b2.Delete(ctx, h); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if left := leftovers(t, id); len(left) > 0 {
				t.Fatalf("leftovers after delete: %v", left)
			}
		})
	}
}

// sandboxProcs lists the host processes whose command line names sandbox
// id's run directory (its sentry and gofer).
func sandboxProcs(id string) []string {
	var out []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		raw, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(raw), filepath.Join(runDir, id)+"/") {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}
