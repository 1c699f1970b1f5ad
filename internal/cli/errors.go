package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// usageError is a mistake in the command line: exit status 2 and a pointer to --help.
type usageError struct {
	cmd *command
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usageErr(c *command, format string, args ...any) error {
	return &usageError{cmd: c, msg: fmt.Sprintf(format, args...)}
}

func isUsage(err error, target **usageError) bool { return errors.As(err, target) }

// hintError attaches the next step to suggest to an error.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// withHint returns err with a hint that replaces the generic one.
func withHint(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &hintError{err: err, hint: fmt.Sprintf(format, args...)}
}

// exitError ends the command with a status and no message of its own: the remote
// command's status for exec, or 1 after a command already said what went wrong.
type exitError struct{ code int }

func (e *exitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

// exitCode returns err as an exitError with status code (nil for 0).
func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

// report prints err (if any) as "warden: message" and a hint on stderr and returns the
// exit status.
func (r *runner) report(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	msg, hint, code := r.describe(err)
	fmt.Fprintf(r.env.Stderr, "warden: %s\n", oneLine(msg))
	if hint != "" {
		fmt.Fprintf(r.env.Stderr, "hint: %s\n", hint)
	}
	return code
}

// describe maps err to the message, hint and exit status the user sees.
func (r *runner) describe(err error) (msg, hint string, code int) {
	msg, code = err.Error(), ExitError
	var ue *usageError
	if errors.As(err, &ue) {
		c := ue.cmd
		if c == nil {
			c = r.cmd
		}
		return msg, fmt.Sprintf("run '%s --help' for usage", c.path()), ExitUsage
	}
	if errors.Is(err, context.Canceled) {
		msg, code = "interrupted", ExitInterrupted
	}
	if isDialError(err) {
		// "create sandbox: Post "http://wardend/v1/sandboxes": dial unix /run/...: connect:
		// connection refused" says less than this.
		why := "connection failed"
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			why = op.Err.Error()
			var errno syscall.Errno
			if errors.As(op.Err, &errno) {
				why = errno.Error()
			}
		}
		msg = "cannot reach wardend at " + r.baseURL + ": " + why
	}
	var he *hintError
	if errors.As(err, &he) {
		return msg, he.hint, code
	}
	if code == ExitInterrupted {
		return msg, "", code
	}
	return msg, r.hintFor(err), code
}

// hintFor suggests what to do about err, or returns "".
func (r *runner) hintFor(err error) string {
	switch {
	case warden.IsUnauthenticated(err):
		h := "set WARDEN_API_KEY or pass --api-key; the first admin key is in " + defaultAdminKeyFile
		if r.keySource == "" && r.env.AdminKeyFile != "" {
			if _, rerr := readKeyFile(r.env.AdminKeyFile); errors.Is(rerr, syscall.EACCES) {
				h += " (readable by root: try sudo)"
			}
		}
		return h
	case warden.IsForbidden(err):
		return "the API key lacks the scope for this, or the object belongs to another principal; 'warden whoami' shows the key's scopes"
	case warden.IsNotFound(err):
		return "check the ID or path; 'warden sandbox ls' lists your sandboxes"
	case warden.IsRateLimited(err):
		return "the daemon is rate limiting this key; wait a moment and try again"
	case hasCode(err, warden.CodeUnavailable):
		return "the daemon cannot serve this now (starting up or shutting down?); try again shortly"
	case hasCode(err, warden.CodeTimeout):
		return "the sandbox's agent did not answer in time; 'warden sandbox inspect ID' shows the sandbox's state"
	case hasCode(err, warden.CodeInternal):
		return "this is a daemon bug: its log has the request ID"
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT) && isDialError(err):
		return "is wardend running? start it with 'sudo wardend', or point --url or WARDEN_URL at it"
	case errors.Is(err, syscall.EACCES) && isDialError(err):
		return "you may not open the daemon's socket: run as root or as a member of its group, or use --url " + defaultURL
	case isDialError(err):
		return "check the daemon's address (--url or WARDEN_URL) and that wardend is running there"
	}
	return ""
}

// hasCode reports whether err wraps a Warden *Error with the given code.
func hasCode(err error, code string) bool {
	var e *warden.Error
	return errors.As(err, &e) && e.Code == code
}

// isDialError reports whether err happened while connecting to the daemon.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// resultCode maps how a remote process ended to warden's exit status: its exit status,
// 128+N when signal N killed it, and 1 when it ended without either (it could not run).
func resultCode(res warden.ExitResult) int {
	switch {
	case res.Signal > 0:
		return 128 + res.Signal
	case res.ExitCode > 0 && res.ExitCode <= 255:
		return res.ExitCode
	case res.ExitCode > 255:
		return 255
	case res.ExitCode == 0 && res.Error == "":
		return 0
	default:
		return 1
	}
}

// oneLine joins a multi-line message into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\r", "")), " ")
}

// quote writes s in double quotes.
func quote(s string) string { return strconv.Quote(s) }
