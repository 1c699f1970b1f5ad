package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFirstSocketGroup: wardend creates its socket group when missing and
// gives it the socket (0660 root:group); a non-root member uses the real CLI
// over the default socket, a non-member is told why the socket is refused
// and how to join, and the CLI falls back to TCP; WARDEN_URL and --url
// without a scheme work.
func TestFirstSocketGroup(t *testing.T) {
	var rb [4]byte
	rand.Read(rb[:])
	group := "wit" + hex.EncodeToString(rb[:])
	if _, err := user.LookupGroup(group); err == nil {
		t.Fatalf("group %s exists already", group)
	}
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--socket-group", group)
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Fatalf("wardend did not create group %s: %v\n%s", group, err, d.log)
	}
	if !d.log.waitFor("created the group", 10*time.Second) {
		t.Errorf("the log does not say the group was created:\n%s", d.log)
	}
	gid, _ := strconv.Atoi(g.Gid)
	fi, err := os.Stat(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Uid != 0 || int(st.Gid) != gid {
		t.Fatalf("socket %s: mode %v owner %d:%d, want 0660 0:%d", d.socket, fi.Mode().Perm(), st.Uid, st.Gid, gid)
	}
	addr := strings.TrimPrefix(d.url, "http://")
	// The mount point of the CLI's default socket dir (left as found).
	if _, err := os.Stat("/run/warden"); os.IsNotExist(err) {
		if err := os.Mkdir("/run/warden", 0o711); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/run/warden") })
	}
	// asUser runs the CLI as uid 65534 with the given supplementary groups
	// ("" for none) in a mount namespace where the daemon's run dir is at
	// /run/warden, so the CLI's default socket is this daemon's.
	asUser := func(t *testing.T, groups string, env []string, args ...string) (string, string, int) {
		t.Helper()
		priv := []string{"--reuid", "65534", "--regid", "65534", "--clear-groups"}
		if groups != "" {
			priv = []string{"--reuid", "65534", "--regid", "65534", "--groups", groups}
		}
		script := `mount --bind "$1" /run/warden && shift && exec setpriv "$@"`
		cmdArgs := append([]string{"-m", "sh", "-c", script, "sh", run}, priv...)
		cmdArgs = append(cmdArgs, append([]string{filepath.Join(binDir, "warden")}, args...)...)
		cmd := exec.Command("unshare", cmdArgs...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/tmp", "WARDEN_API_KEY=" + d.adminKey}, env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	refused := "warden: cannot use the daemon's socket /run/warden/wardend.sock: permission denied (to use it, join its group: sudo usermod -aG " + group + " $USER, then log in again); trying http://127.0.0.1:7070"
	for _, tc := range []struct {
		name    string
		groups  string
		env     []string
		args    []string
		ok      bool
		refused bool // the fallback message
	}{
		{"member over the socket", g.Gid, nil, []string{"whoami"}, true, false},
		{"non-member falls back to tcp", "", nil, []string{"whoami"}, false, true},
		{"WARDEN_URL without a scheme", "", []string{"WARDEN_URL=" + addr}, []string{"whoami"}, true, false},
		{"--url without a scheme", "", nil, []string{"--url", addr, "whoami"}, true, false},
		{"WARDEN_URL a socket path", g.Gid, []string{"WARDEN_URL=/run/warden/wardend.sock"}, []string{"whoami"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := asUser(t, tc.groups, tc.env, tc.args...)
			if (code == 0) != tc.ok {
				t.Fatalf("exit %d, want success %v: %q %q", code, tc.ok, out, errOut)
			}
			if tc.ok && !strings.Contains(out, "admin") {
				t.Errorf("whoami: %q, want the admin principal", out)
			}
			if got := strings.Contains(errOut, refused); got != tc.refused {
				t.Errorf("stderr %q: fallback message present %v, want %v (%q)", errOut, got, tc.refused, refused)
			}
		})
	}
}
