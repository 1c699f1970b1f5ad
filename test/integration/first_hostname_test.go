package integration

import (
	"strings"
	"testing"
	"time"
)

// TestFirstHostnameIsID: every sandbox's hostname is its id, whether the
// create claimed a pre-started sandbox from the warm pool or booted one
// (through the real CLI: `warden sandbox create` and `warden exec`).
func TestFirstHostnameIsID(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--pool-size", "1")
	// fromPool reports whether id was claimed from the pool: its host-side
	// directory is still named pool-<the id's suffix>.
	fromPool := func(id string) bool {
		dirs, _ := poolDirs(run)
		for _, dir := range dirs {
			if strings.HasSuffix(dir, "/pool-"+strings.TrimPrefix(id, "sb-")) {
				return true
			}
		}
		return false
	}
	create := func(args ...string) string {
		out, errOut, code := d.cli(t, "", append([]string{"sandbox", "create"}, args...)...)
		id := strings.TrimSpace(out)
		if code != 0 || !strings.HasPrefix(id, "sb-") {
			t.Fatalf("create: code %d, %q %q", code, out, errOut)
		}
		t.Cleanup(func() { d.cli(t, "", "sandbox", "kill", id) })
		return id
	}
	// A default create claims the pooled sandbox once it is warm (its
	// directory appears before it is ready, so a create can still boot).
	var pooled string
	for deadline := time.Now().Add(30 * time.Second); pooled == ""; {
		if id := create(); fromPool(id) {
			pooled = id
		} else if time.Now().After(deadline) {
			t.Fatalf("no default create claimed the warm pool's sandbox\n%s", d.log)
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
	booted := create("--memory", "256") // other limits: never from the pool
	if fromPool(booted) {
		t.Fatalf("a create with --memory 256 claimed a pooled sandbox")
	}
	for _, id := range []string{pooled, booted} {
		for _, cmd := range []string{"hostname", "cat /etc/hostname", "grep -c \"[[:space:]]$(hostname)$\" /etc/hosts"} {
			out, errOut, code := d.cli(t, "", "exec", id, "--", "sh", "-c", cmd)
			want := id
			if strings.HasPrefix(cmd, "grep") {
				want = "1"
			}
			if code != 0 || strings.TrimSpace(out) != want {
				t.Errorf("%s in %s: %q (code %d, %s), want %q", cmd, id, out, code, errOut, want)
			}
		}
	}
}
