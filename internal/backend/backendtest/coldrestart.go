package backendtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
)

// ColdRestart runs the suite's cold restart test (see testColdRestart)
// alone, for a backend configured to keep writable layers on disk where
// its conformance run keeps them in memory.
func ColdRestart(t *testing.T, f Factory) { testColdRestart(t, f, f.New(t)) }

// coldMarker is the command line of the background process a cold restart
// must end.
const coldMarker = "sleep 7777"

// coldProbe prints the sandbox's boot identity (the kernel's boot id and
// PID 1's start time) and how many processes run coldMarker. An unconfined
// backend's /proc is the host's: only the count means something there.
const coldProbe = `cat /proc/sys/kernel/random/boot_id; cut -d' ' -f22 /proc/1/stat
n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "` + coldMarker + ` ") n=$((n+1));; esac; done; echo $n`

// testColdRestart checks backend.Restarter (E2B's filesystem-only pause)
// on a backend that declares Capabilities.ColdRestart: StopKeep ends every
// process and keeps the writable layer (a file written, a template file
// changed, a template file deleted); the sandbox is stopped and recovered
// stopped by a restarted daemon; Restart boots it again (a new boot: a new
// kernel's boot id or a new PID 1) on those files, with no process of
// before; that works twice; Delete leaves nothing.
func testColdRestart(t *testing.T, f Factory, b backend.Backend) {
	t.Helper()
	r, ok := b.(backend.Restarter)
	if !b.Capabilities().ColdRestart || !ok {
		t.Skipf("backend %s declares no cold restart", b.ID())
	}
	ctx := context.Background()
	s := Start(t, f, b, nil)
	home, _ := s.dirs(t, f)
	s.Sh(t, "", "echo kept > "+home+"/cold && mkdir -p "+home+"/d/e && echo deep > "+home+"/d/e/f")
	// The writable layer over the template: a template file changed and
	// another deleted (a whiteout), as root.
	var changed, deleted string
	if !f.Unconfined {
		out := s.Sh(t, "root", `set -e; c=$(ls /etc/*.conf | head -1); d=$(ls /etc/*.conf | sed -n 2p); echo changed >> "$c"; rm "$d"; echo "$c"; echo "$d"`)
		changed, deleted, _ = strings.Cut(strings.TrimSpace(out), "\n")
		if changed == "" || deleted == "" {
			t.Fatalf("no template files to change: %q", out)
		}
	}
	s.Sh(t, "", "("+coldMarker+" >/dev/null 2>&1 &); sleep 0.2")
	before := strings.Fields(s.Sh(t, "", coldProbe))
	if len(before) != 3 || before[2] != "1" {
		t.Fatalf("before the stop: boot id, PID 1 start and %q count = %q; want one such process", coldMarker, before)
	}

	if _, err := r.Restart(ctx, s.H); !errors.Is(err, backend.ErrAlreadyStart) {
		t.Fatalf("restart of a running sandbox = %v, want ErrAlreadyStart", err)
	}
	kh, err := r.StopKeep(ctx, s.H)
	if errors.Is(err, backend.ErrUnsupported) {
		// Allowed for a sandbox whose writable layer would not outlive
		// its processes (in memory): refused before anything ends.
		if st, serr := b.Status(ctx, s.H); serr != nil || st != backend.StateRunning {
			t.Fatalf("stop keep refused (%v) but the sandbox is %q, %v; want running", err, st, serr)
		}
		if got := s.Sh(t, "", "cat "+home+"/cold"); got != "kept\n" {
			t.Fatalf("stop keep refused (%v); the sandbox's file then reads %q", err, got)
		}
		t.Skipf("SKIP: backend %s refuses to stop this sandbox keeping its files, as it may where its writable layer is in memory: %v (the refusal left it running, checked)", b.ID(), err)
	}
	if err != nil {
		t.Fatalf("stop keep: %v", err)
	}
	s.Client.Close()
	if st, err := b.Status(ctx, kh); err != nil || st != backend.StateStopped {
		t.Fatalf("status after stop keep = %q, %v; want stopped", st, err)
	}
	if c, err := b.DialAgent(ctx, kh); err == nil {
		c.Close()
		t.Fatal("dial agent of a stopped sandbox succeeded")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = b.Wait(wctx, kh)
	cancel()
	if !errors.Is(err, backend.ErrNotRunning) {
		t.Fatalf("wait on a stopped sandbox = %v, want ErrNotRunning", err)
	}
	if _, err := r.StopKeep(ctx, kh); err == nil {
		t.Fatal("a second stop keep succeeded")
	}

	// A restarted daemon finds it stopped, with its files.
	b2 := f.New(t)
	if err := b2.Recover(ctx, kh); err != nil {
		t.Fatalf("recover a stopped sandbox: %v", err)
	}
	if st, err := b2.Status(ctx, kh); err != nil || st != backend.StateStopped {
		t.Fatalf("status of a stopped sandbox after recovery = %q, %v; want stopped", st, err)
	}
	r2 := b2.(backend.Restarter)
	for cycle := 1; cycle <= 2; cycle++ {
		h, err := r2.Restart(ctx, kh)
		if err != nil {
			t.Fatalf("restart %d: %v", cycle, err)
		}
		if st, err := b2.Status(ctx, h); err != nil || st != backend.StateRunning {
			t.Fatalf("status after restart %d = %q, %v; want running", cycle, st, err)
		}
		c := agentclient.New(func(ctx context.Context) (netConn, error) { return b2.DialAgent(ctx, h) })
		s2 := &Sandbox{B: b2, H: h, Client: c, home: s.home, tmp: s.tmp}
		if got := s2.Sh(t, "", "cat "+home+"/cold "+home+"/d/e/f"); got != strings.Repeat("kept\n", cycle)+"deep\n" {
			c.Close()
			t.Fatalf("restart %d: kept files read %q", cycle, got)
		}
		if !f.Unconfined {
			got := s2.Sh(t, "", `tail -n1 "`+changed+`"; [ -e "`+deleted+`" ] && echo back || echo deleted`)
			if got != "changed\ndeleted\n" {
				c.Close()
				t.Fatalf("restart %d: the changed and the deleted template file read %q", cycle, got)
			}
		}
		after := strings.Fields(s2.Sh(t, "", coldProbe))
		if len(after) != 3 || after[2] != "0" {
			c.Close()
			t.Fatalf("restart %d: %q count %q; want 0: a process outlived the stop", cycle, coldMarker, after)
		}
		if !f.Unconfined && after[0] == before[0] && after[1] == before[1] {
			c.Close()
			t.Fatalf("restart %d: boot id %s and PID 1 start %s as before: not a new boot", cycle, after[0], after[1])
		}
		// Written now, kept by the next stop.
		s2.Sh(t, "", "echo kept >> "+home+"/cold; ("+coldMarker+" >/dev/null 2>&1 &); sleep 0.2")
		before = strings.Fields(s2.Sh(t, "", coldProbe))
		if kh, err = r2.StopKeep(ctx, h); err != nil {
			c.Close()
			t.Fatalf("stop keep %d: %v", cycle+1, err)
		}
		c.Close()
	}
	if err := b2.Delete(ctx, kh); err != nil {
		t.Fatalf("delete a stopped sandbox: %v", err)
	}
	if left := f.Leftovers(t, kh.ID); len(left) > 0 {
		t.Fatalf("leftovers after delete: %v", left)
	}
}
