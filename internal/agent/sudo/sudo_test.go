package sudo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/warden-sandbox/warden/internal/agent/process"
)

// The test binary doubles as the sudo program: with SUDO_TEST_SOCKET set
// it runs Main on its arguments, as the agent binary does when it is
// invoked as "sudo".
func TestMain(m *testing.M) {
	if sock := os.Getenv("SUDO_TEST_SOCKET"); sock != "" {
		os.Exit(Main(os.Args[1:], sock, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Options
		err  string
	}{
		{args: []string{"id", "-u"}, want: Options{User: "root", Command: []string{"id", "-u"}}},
		{args: []string{"-u", "user", "whoami"}, want: Options{User: "user", Command: []string{"whoami"}}},
		{args: []string{"-uuser", "whoami"}, want: Options{User: "user", Command: []string{"whoami"}}},
		{args: []string{"--user=nobody", "-E", "env"}, want: Options{User: "nobody", PreserveEnv: true, Command: []string{"env"}}},
		{args: []string{"--user", "#1000", "id"}, want: Options{User: "1000", Command: []string{"id"}}},
		{args: []string{"-nE", "--", "-x"}, want: Options{User: "root", NonInteract: true, PreserveEnv: true, Command: []string{"-x"}}},
		{args: []string{"-i"}, want: Options{User: "root", Login: true, Command: []string{}}},
		{args: []string{"-s", "echo", "a b"}, want: Options{User: "root", Shell: true, Command: []string{"echo", "a b"}}},
		{args: []string{"-H", "-n", "ls", "-l"}, want: Options{User: "root", NonInteract: true, Command: []string{"ls", "-l"}}},
		{args: []string{"-h"}, want: Options{User: "root", Help: true, Command: []string{}}},
		{args: []string{"-k", "ls"}, err: "invalid option -- 'k'"},
		{args: []string{"--askpass", "ls"}, err: "unrecognized option '--askpass'"},
		{args: []string{"-u"}, err: "requires an argument"},
		{args: []string{"-i", "-s"}, err: "both the -i and -s"},
		{args: []string{"-E"}, err: "a command is required"},
		{args: []string{}, err: "a command is required"},
		{args: []string{"--preserve-env=PATH", "ls"}, err: "not supported"},
	} {
		got, err := Parse(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) error = %v, want one containing %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.args, err)
			continue
		}
		if got.Command == nil {
			got.Command = []string{}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	if got, want := shellJoin([]string{"echo", "a b", "$HOME", "x;y"}), `echo a\ b $HOME x\;y`; got != want {
		t.Errorf("shellJoin = %q, want %q", got, want)
	}
}

// TestServeRunsAsRoot runs the sudo program (this test binary) as an
// unprivileged user against a Server: the command runs as root with the
// caller's stdio, the exit status comes back, -u switches user, -E keeps
// the environment, and a missing command says so.
func TestServeRunsAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the sudo server starts processes as other users, which needs root")
	}
	dir, err := os.MkdirTemp("", "warden-sudo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // uid 65534 runs the program from here
	sock := filepath.Join(dir, "run", "sudo.sock")
	procs := process.New(process.Config{DefaultUser: "root"})
	defer procs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := (&Server{Procs: procs}).Listen(ctx, sock); err != nil {
		t.Fatal(err)
	}
	// A copy of this test binary that uid 65534 may run (go test's
	// directory is root's only), named sudo as in a sandbox.
	self := filepath.Join(dir, "sudo")
	if exe, err := os.ReadFile("/proc/self/exe"); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(self, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	// The caller: uid 65534 (nobody), as the sandbox's "user" would be.
	run := func(env []string, args ...string) (string, string, int) {
		cmd := exec.Command(self, args...)
		cmd.Env = append([]string{"SUDO_TEST_SOCKET=" + sock, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "MARK=kept"}, env...)
		cmd.Dir = "/"
		cmd.SysProcAttr = nobody()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	if out, errs, code := run(nil, "id", "-u"); out != "0\n" || code != 0 {
		t.Errorf("sudo id -u = %q (stderr %q, exit %d), want 0", out, errs, code)
	}
	if out, errs, code := run(nil, "sh", "-c", "echo $SUDO_UID $USER $MARK; echo e >&2; exit 7"); out != "65534 root\n" || errs != "e\n" || code != 7 {
		t.Errorf("sudo sh -c ... = %q, %q, exit %d; want %q, %q, exit 7", out, errs, code, "65534 root\n", "e\n")
	}
	if out, _, _ := run(nil, "-E", "sh", "-c", "echo $MARK $HOME"); out != "kept /root\n" {
		t.Errorf("sudo -E: %q, want %q", out, "kept /root\n")
	}
	if out, errs, code := run(nil, "-u", "nobody", "id", "-un"); out != "nobody\n" || code != 0 {
		t.Errorf("sudo -u nobody id -un = %q (stderr %q, exit %d)", out, errs, code)
	}
	if out, _, code := run(nil, "-s", "echo", "a  b"); out != "a  b\n" || code != 0 {
		t.Errorf("sudo -s echo 'a  b' = %q, exit %d", out, code)
	}
	if out, _, _ := run(nil, "-i", "pwd"); out != "/root\n" {
		t.Errorf("sudo -i pwd = %q, want /root", out)
	}
	if _, errs, code := run(nil, "no-such-command-s18"); code != 1 || !strings.Contains(errs, "no-such-command-s18: command not found") {
		t.Errorf("missing command: exit %d, stderr %q", code, errs)
	}
	if _, errs, code := run(nil, "-k", "ls"); code != 1 || !strings.Contains(errs, "invalid option -- 'k'") {
		t.Errorf("unknown flag: exit %d, stderr %q", code, errs)
	}
	if _, errs, code := run(nil, "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Errorf("signalled command: exit %d (stderr %q), want 143", code, errs)
	}
	// Without the agent's socket (sudo: false), sudo says why.
	if _, errs, code := run([]string{"SUDO_TEST_SOCKET=" + filepath.Join(dir, "none.sock")}, "true"); code != 1 || !strings.Contains(errs, "does not allow sudo") {
		t.Errorf("no socket: exit %d, stderr %q", code, errs)
	}
}

func nobody() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}
