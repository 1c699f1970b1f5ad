package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestFirstBigUpload: `warden cp` of a 2 GiB file into a sandbox with the
// default limits (512 MiB memory, 1 GiB disk) ends with a clear "disk is
// full" error (413 payload_too_large through the API), the sandbox still
// running, no OOM kill and no partial file. Both backends: a gvisor
// sandbox's writable layer is gVisor's filestore in a per-sandbox disk image
// (see docs/gvisor.md), and it keeps pause, resume and fork: the data
// written survives a pause, each fork has its own copy, and a paused
// sandbox holds no image.
func TestFirstBigUpload(t *testing.T) {
	state, run := newDirs(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)

	src := filepath.Join(t.TempDir(), "big.bin")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil { // sparse: reads as 2 GiB of zeros
		t.Fatal(err)
	}
	f.Close()

	for _, iso := range []string{"native", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			if iso == "gvisor" {
				if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
					t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
				}
			}
			out, errb, code := d.cli(t, "", "sandbox", "create", "--isolation", iso)
			id := strings.TrimSpace(out)
			if code != 0 || !strings.HasPrefix(id, "sb-") {
				t.Fatalf("create: code %d, %q %q", code, out, errb)
			}
			t.Cleanup(func() { d.cli(t, "", "sandbox", "kill", id) })

			out, errb, code = d.cli(t, "", "cp", src, id+":/home/user/big.bin")
			if code == 0 {
				t.Fatalf("cp of 2 GiB into a 1 GiB disk succeeded: %q", out)
			}
			if !strings.Contains(errb, "sandbox disk is full (limit 1024 MiB)") {
				t.Errorf("cp error does not say the disk is full: %q\ndaemon log:\n%s", errb, d.log)
			}
			for _, bad := range []string{"connection reset", "broken pipe", "EOF", "not running"} {
				if strings.Contains(errb, bad) {
					t.Errorf("cp error shows %q instead of the failure: %q", bad, errb)
				}
			}

			// The API: 413 payload_too_large.
			big, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			// Up to 1 GiB goes in before the disk is full: on a loaded
			// machine that takes longer than ctxT's minute (gVisor's gofer).
			upCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			_, err = c.WriteFile(upCtx, id, "/home/user/big3.bin", big, warden.WriteOptions{})
			cancel()
			big.Close()
			var apiErr *warden.Error
			if !errors.As(err, &apiErr) || apiErr.Status != 413 || apiErr.Code != warden.CodePayloadTooLarge {
				t.Errorf("API upload of 2 GiB: %v, want 413 payload_too_large", err)
			}

			// The sandbox lives, has room again, and kept no partial file.
			out, errb, code = d.cli(t, "", "exec", id, "--", "sh", "-c", "ls -A /home/user | grep -c big || true; echo ok > /home/user/small && cat /home/user/small")
			if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "ok") || !strings.HasPrefix(strings.TrimSpace(out), "0") {
				t.Errorf("after the failed upload: code %d, %q %q", code, out, errb)
			}
			sb, err := c.GetSandbox(ctxT(t), id)
			if err != nil || sb.State != "running" {
				t.Fatalf("sandbox after the failed upload: %+v %v", sb, err)
			}
			u, err := c.Usage(ctxT(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if u.OOMEvents != 0 {
				t.Errorf("%d OOM events during the upload", u.OOMEvents)
			}
			if iso == "gvisor" {
				gvisorDiskPauseFork(t, d, state, id)
			}
		})
	}
}

// gvisorDiskPauseFork: 600 MiB written to a gvisor sandbox's disk (more
// than its 512 MiB memory) survive a pause and a resume, a paused sandbox
// has no disk image, and each fork gets its own image and copy.
func gvisorDiskPauseFork(t *testing.T, d *daemon, state, id string) {
	t.Helper()
	img := filepath.Join(state, "disks", "gvisor", id+".img")
	sh := func(id, script string) string {
		t.Helper()
		out, errb, code := d.cli(t, "", "exec", id, "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("%s: %q: code %d, %q %q", id, script, code, out, errb)
		}
		return strings.TrimSpace(out)
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("a running gvisor sandbox has no disk image: %v", err)
	}
	sum := sh(id, "head -c 629145600 /dev/urandom > /home/user/data && md5sum < /home/user/data")
	if out, errb, code := d.cli(t, "", "sandbox", "pause", id); code != 0 {
		t.Fatalf("pause with 600 MiB on disk: code %d, %q %q\ndaemon log:\n%s", code, out, errb, d.log)
	}
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a paused gvisor sandbox kept its disk image: %v", err)
	}
	if out, errb, code := d.cli(t, "", "sandbox", "resume", id); code != 0 {
		t.Fatalf("resume: code %d, %q %q\ndaemon log:\n%s", code, out, errb, d.log)
	}
	if got := sh(id, "md5sum < /home/user/data"); got != sum {
		t.Fatalf("600 MiB file after pause and resume: md5 %q, want %q", got, sum)
	}
	out, errb, code := d.cli(t, "", "sandbox", "fork", "-n", "2", id)
	forks := strings.Fields(out)
	if code != 0 || len(forks) != 2 {
		t.Fatalf("fork: code %d, %q %q\ndaemon log:\n%s", code, out, errb, d.log)
	}
	for _, f := range forks {
		t.Cleanup(func() { d.cli(t, "", "sandbox", "kill", f) })
	}
	for i, f := range forks {
		if _, err := os.Stat(filepath.Join(state, "disks", "gvisor", f+".img")); err != nil {
			t.Errorf("fork %s has no disk image of its own: %v", f, err)
		}
		if got := sh(f, "md5sum < /home/user/data"); got != sum {
			t.Errorf("fork %s: md5 %q, want the source's %q", f, got, sum)
		}
		sh(f, "echo fork"+string(rune('0'+i))+" > /home/user/data")
	}
	for i, f := range forks {
		if got := sh(f, "cat /home/user/data"); got != "fork"+string(rune('0'+i)) {
			t.Errorf("fork %s sees %q: forks share a writable layer", f, got)
		}
	}
	if got := sh(id, "md5sum < /home/user/data"); got != sum {
		t.Errorf("the source after its forks wrote: md5 %q, want %q", got, sum)
	}
}

// TestFirstGVisorUsage: `warden sandbox usage` of a gvisor sandbox says
// "not reported" for what gVisor hides from the host, never -1.
func TestFirstGVisorUsage(t *testing.T) {
	if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
		t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
	}
	state, run := newDirs(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	d := startDaemon(t, state, run)
	out, errb, code := d.cli(t, "", "sandbox", "create", "--isolation", "gvisor")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: code %d, %q %q", code, out, errb)
	}
	t.Cleanup(func() { d.cli(t, "", "sandbox", "kill", id) })
	out, errb, code = d.cli(t, "", "sandbox", "usage", id)
	if code != 0 || strings.Contains(out, "-1") || !strings.Contains(out, "not reported") {
		t.Errorf("usage of a gvisor sandbox: code %d\n%s%s", code, out, errb)
	}
}
