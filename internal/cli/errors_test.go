package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestResultCode(t *testing.T) {
	for _, tc := range []struct {
		res  warden.ExitResult
		want int
	}{
		{warden.ExitResult{ExitCode: 0, Status: "exit status 0"}, 0},
		{warden.ExitResult{ExitCode: 1}, 1},
		{warden.ExitResult{ExitCode: 42}, 42},
		{warden.ExitResult{ExitCode: 255}, 255},
		{warden.ExitResult{ExitCode: 300}, 255},
		{warden.ExitResult{ExitCode: -1, Signal: 9, Status: "signal: killed"}, 137},
		{warden.ExitResult{ExitCode: -1, Signal: 15}, 143},
		{warden.ExitResult{ExitCode: -1, Signal: 2}, 130},
		{warden.ExitResult{ExitCode: -1, Error: "could not start"}, 1},
		{warden.ExitResult{ExitCode: 0, Error: "timeout"}, 1},
		{warden.ExitResult{ExitCode: -1, Signal: 9, Error: "timeout"}, 137},
	} {
		if got := resultCode(tc.res); got != tc.want {
			t.Errorf("resultCode(%+v) = %d, want %d", tc.res, got, tc.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	dir := t.TempDir()
	r := &runner{env: Env{AdminKeyFile: filepath.Join(dir, "none")}, cmd: &command{name: "warden"}, baseURL: "unix:///run/warden/wardend.sock"}
	apiErr := func(status int, code string) error {
		return fmt.Errorf("get sandbox sb-1: %w", &warden.Error{Status: status, Code: code, Message: "m", RequestID: "req-1"})
	}
	dial := func(errno error) error {
		return fmt.Errorf("list sandboxes: %w", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)})
	}
	for _, tc := range []struct {
		name string
		err  error
		code int
		msg  string // in the message
		hint string // in the hint; "" means no hint
	}{
		{"usage", usageErr(&command{name: "warden"}, "bad"), ExitUsage, "bad", "run 'warden --help' for usage"},
		{"unauthenticated", apiErr(401, warden.CodeUnauthenticated), ExitError, "unauthenticated: m", "set WARDEN_API_KEY or pass --api-key; the first admin key is in /var/lib/warden/admin.key"},
		{"forbidden", apiErr(403, warden.CodeForbidden), ExitError, "forbidden", "'warden whoami'"},
		{"not found", apiErr(404, warden.CodeNotFound), ExitError, "not_found", "'warden sandbox ls'"},
		{"rate limited", apiErr(429, warden.CodeRateLimited), ExitError, "rate_limited", "try again"},
		{"unavailable", apiErr(503, warden.CodeUnavailable), ExitError, "unavailable", "try again shortly"},
		{"timeout", apiErr(504, warden.CodeTimeout), ExitError, "timeout", "did not answer in time"},
		{"internal", apiErr(500, warden.CodeInternal), ExitError, "internal", "daemon bug"},
		{"conflict", apiErr(409, warden.CodeConflict), ExitError, "conflict: m", ""},
		{"refused", dial(errors.New("x")), ExitError, "cannot reach wardend at unix:///run/warden/wardend.sock", "check the daemon's address"},
		{"refused errno", dial(syscall.ECONNREFUSED), ExitError, "cannot reach wardend at unix:///run/warden/wardend.sock: connection refused", "is wardend running? start it with"},
		{"no socket", dial(syscall.ENOENT), ExitError, "no such file or directory", "is wardend running?"},
		{"socket permission", dial(syscall.EACCES), ExitError, "permission denied", "run as root"},
		{"interrupted", fmt.Errorf("exec: %w", context.Canceled), ExitInterrupted, "interrupted", ""},
		{"interrupted with hint", withHint(context.Canceled, "reattach"), ExitInterrupted, "interrupted", "reattach"},
		{"hint wins", withHint(apiErr(404, warden.CodeNotFound), "custom"), ExitError, "not_found", "custom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, hint, code := r.describe(tc.err)
			if code != tc.code || !strings.Contains(msg, tc.msg) || (tc.hint == "") != (hint == "") || !strings.Contains(hint, tc.hint) {
				t.Errorf("describe = %q, %q, %d; want message with %q, hint with %q, code %d", msg, hint, code, tc.msg, tc.hint, tc.code)
			}
		})
	}
}

func TestReportFormat(t *testing.T) {
	env, _, errb := testEnv(t, "")
	r := &runner{env: env, cmd: &command{name: "warden"}}
	code := r.report(fmt.Errorf("first line\nsecond line: %w", &warden.Error{Status: 404, Code: warden.CodeNotFound, Message: "gone"}))
	want := "warden: first line second line: not_found: gone (http 404)\nhint: check the ID or name\n"
	if code != ExitError || errb.String() != want {
		t.Errorf("code %d, stderr:\n%s\nwant:\n%s", code, errb.String(), want)
	}
	errb.Reset()
	if code := r.report(exitCode(7)); code != 7 || errb.Len() != 0 {
		t.Errorf("exitError: code %d, stderr %q", code, errb.String())
	}
	if exitCode(0) != nil {
		t.Error("exitCode(0) should be nil")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bogus"}, `warden: unknown command "bogus" for "warden"` + "\nhint: run 'warden --help' for usage\n"},
		{[]string{"sandbox", "bogus"}, `warden: unknown command "bogus" for "warden sandbox"` + "\nhint: run 'warden sandbox --help' for usage\n"},
		{[]string{"sandbox", "create", "--bogus"}, "warden: unknown flag --bogus\nhint: run 'warden sandbox create --help' for usage\n"},
		{[]string{"sandbox", "create", "--cpu", "x"}, "warden: flag --cpu: invalid value \"x\": want a number of CPUs such as 2 or 0.5, or millicores such as 500m\nhint: run 'warden sandbox create --help' for usage\n"},
		{[]string{"sandbox", "create", "--template"}, "warden: flag --template needs a value\nhint: run 'warden sandbox create --help' for usage\n"},
		{[]string{"sandbox", "create", "--env", "=x"}, "warden: flag --env: invalid value \"=x\": \"=x\" has an empty key\nhint: run 'warden sandbox create --help' for usage\n"},
		{[]string{"sandbox", "create", "--timeout", "soon"}, "warden: flag --timeout: invalid value \"soon\": bad duration \"soon\": want a number of seconds or a duration such as 90s, 5m, 1h30m, 2d\nhint: run 'warden sandbox create --help' for usage\n"},
		{[]string{"sandbox", "inspect"}, "warden: want one sandbox ID, got 0 arguments\nhint: run 'warden sandbox inspect --help' for usage\n"},
		{[]string{"sandbox", "timeout", "sb-1", "1.5s"}, "warden: duration \"1.5s\" is not a whole number of seconds\nhint: run 'warden sandbox timeout --help' for usage\n"},
		{[]string{"exec", "sb-1"}, "warden: want a command after the sandbox ID: warden exec sb-1 -- CMD [ARG...]\nhint: run 'warden exec --help' for usage\n"},
		{[]string{"exec", "-t", "--json", "sb-1", "--", "ls", "-l"}, "warden: --json cannot be used with -t\nhint: run 'warden exec --help' for usage\n"},
		{[]string{"sandbox", "create", "--memory", "1.5x"}, "warden: flag --memory: invalid value \"1.5x\": want a size such as 512m, 1g or 10G (a bare number is MiB)\nhint: run 'warden sandbox create --help' for usage\n"},
		{[]string{"sandbox", "kill"}, "warden: want at least one sandbox ID (or --all, or --meta K=V)\nhint: run 'warden sandbox kill --help' for usage\n"},
		{[]string{"sandbox", "kill", "--all", "sb-1"}, "warden: give sandbox IDs or --all/--meta, not both\nhint: run 'warden sandbox kill --help' for usage\n"},
		{[]string{"exec", "-it", "--cwd", "/x", "--tag", "t", "sb-1"}, "warden: --cwd, --tag cannot be used with -t: the terminal API does not take them\nhint: run 'warden exec --help' for usage\n"},
		{[]string{"cp", "a", "b"}, "warden: one of SRC and DST must be ID:/path in a sandbox\nhint: run 'warden cp --help' for usage\n"},
		{[]string{"cp", "sb-1:", "b"}, "warden: SRC \"sb-1:\": no path after \"sb-1:\"\nhint: run 'warden cp --help' for usage\n"},
		{[]string{"keys", "create"}, "warden: want at least one --scope\nhint: run 'warden keys create --help' for usage\n"},
		{[]string{"principals", "create", "--kind", "robot", "x"}, "warden: --kind must be agent or user\nhint: run 'warden principals create --help' for usage\n"},
		{[]string{"process", "signal", "sb-1", "12", "-s", "WINCH"}, "warden: unknown signal \"WINCH\": want one of HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP\nhint: run 'warden process signal --help' for usage\n"},
		{[]string{"process", "attach", "--replay=maybe", "sb-1", "1"}, "warden: flag --replay: invalid value \"maybe\": want true or false, not \"maybe\"\nhint: run 'warden process attach --help' for usage\n"},
		{[]string{"help", "nope"}, "warden: unknown command \"nope\" for \"warden\"\nhint: run 'warden help --help' for usage\n"},
	} {
		res := run(t, nil, tc.args...)
		if res.code != ExitUsage || res.stderr != tc.msg || res.stdout != "" {
			t.Errorf("%q: code %d, stdout %q, stderr:\n%s\nwant:\n%s", tc.args, res.code, res.stdout, res.stderr, tc.msg)
		}
	}
}

func TestGroupWithoutCommand(t *testing.T) {
	res := run(t, nil, "sandbox")
	if res.code != ExitUsage || !strings.HasPrefix(res.stderr, "Usage:\n  warden sandbox <command>") || res.stdout != "" {
		t.Errorf("code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
}
