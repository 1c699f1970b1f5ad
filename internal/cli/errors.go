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

// codedError is err reported as usual but with its own exit status (127 for a command
// that is not found, as shells do).
type codedError struct {
	err  error
	code int
	hint string
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

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
	var ce *codedError
	if errors.As(err, &ce) {
		return msg, ce.hint, ce.code
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
	case warden.IsPermissionDenied(err):
		return permissionHint(r.cmd)
	case warden.IsForbidden(err):
		return "the API key lacks the scope for this, or the object belongs to another principal; 'warden whoami' shows the key's scopes"
	case warden.IsNotFound(err):
		return notFoundHint(err)
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

// permissionHint is the hint for a permission error inside the sandbox: run as another
// user where the command can.
func permissionHint(c *command) string {
	if c != nil && c.fs != nil && c.fs.fs.Lookup("user") != nil {
		return "the sandbox's user may not access this; pass --user root (or another user) to " + c.path()
	}
	return "the sandbox's user may not access this; 'warden exec --user root ID -- CMD' runs a command as root"
}

// notFoundHint names the command that lists what err did not find: the SDK's message
// starts with the operation ("get template x: ...", "delete secret y: ...").
func notFoundHint(err error) string {
	var e *warden.Error
	apiMsg := ""
	if errors.As(err, &e) {
		apiMsg = e.Message
	}
	op := err.Error()
	if i := strings.Index(op, warden.CodeNotFound); i >= 0 {
		op = op[:i]
	}
	// The SDK's operation starts with its verb and object.
	starts := func(prefixes ...string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(op, p) {
				return true
			}
		}
		return false
	}
	const sandboxHint = "check the sandbox ID; 'warden sandbox ls' lists your live sandboxes ('-a' for all)"
	switch {
	case strings.HasPrefix(apiMsg, "sandbox "):
		return sandboxHint
	case starts("get template", "delete template", "build template", "import"):
		return "check the template's name; 'warden template ls' lists the templates"
	case starts("put secret", "revoke secret", "delete secret", "list grants", "revoke grant"):
		return "check the secret's ID; 'warden secret ls' lists the secrets"
	case starts("grant secret", "create key"):
		return "check the principal (or the secret); 'warden principals ls' lists the principals"
	case starts("revoke key"):
		return "check the key's ID; 'warden keys ls' lists the keys"
	case starts("restart code context", "delete code context", "interrupt code context"):
		return "check the context ID; 'warden contexts ls ID' lists the sandbox's contexts"
	case starts("signal process", "send stdin", "close stdin", "stream process"):
		return "check the process ID; 'warden process ls ID' lists the sandbox's processes"
	case starts("read ", "write ", "stat ", "list /", "remove ", "move ", "mkdir ", "watch ", "download archive", "upload archive", "presign"):
		return "check the path; 'warden fs ls ID DIR' lists a directory in the sandbox"
	case strings.Contains(op, "sandbox") || strings.Contains(apiMsg, "sandbox"):
		return sandboxHint
	}
	return "check the ID or name"
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
