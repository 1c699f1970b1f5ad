package govern

import (
	"context"
	"strings"
)

// Builders shared by the doors (the native API, the E2B API), so that the
// same request is described the same way, and the same rule decides it the
// same way, whichever door it came through. NewExec (action.go) describes a
// command line.

// NewFile describes a file operation: path (and dest, for a move) made
// clean and absolute (relative paths are taken from /), op one of read,
// write, remove, list, stat, mkdir, move, watch, and size the bytes
// written when known (a Content-Length), else 0.
func NewFile(op, path, dest string, size int64) *File {
	f := &File{Op: op, Path: CleanPath(path, ""), Size: size}
	if dest != "" {
		f.Dest = CleanPath(dest, "")
	}
	if size < 0 {
		f.Size = 0
	}
	return f
}

// NewCode describes a code run: the language ("" is the interpreter's
// default, python) and the code.
func NewCode(language, code string) *Code {
	if language == "" {
		language = "python"
	}
	return &Code{Language: language, Code: code}
}

// NewNetwork describes a network policy (a network.change's new policy,
// or a new sandbox's): mode "" is none; allow holds each allow rule's host
// or CIDR, hosts lower-cased without a trailing dot, so the doors describe
// the same policy the same way.
func NewNetwork(mode string, allow []string) *Network {
	n := &Network{Mode: mode}
	if n.Mode == "" {
		n.Mode = "none"
	}
	for _, a := range allow {
		n.Allow = append(n.Allow, strings.TrimSuffix(strings.ToLower(strings.TrimSpace(a)), "."))
	}
	return n
}

// NewLifecycle describes a change of a sandbox's life (op one of OpKill,
// OpTimeout, OpPause, OpResume, OpConnect, OpFork).
func NewLifecycle(op string, timeoutSeconds, count int64, cold bool) *Lifecycle {
	return &Lifecycle{Op: op, TimeoutSeconds: max(timeoutSeconds, 0), Count: max(count, 0), Cold: cold}
}

// NewPreview describes one request proxied to a sandbox port: its method,
// the path the program sees (the query dropped) and how it was let in
// (key, token, cookie, public). A WebSocket is decided by the request that
// opens it.
func NewPreview(port int, method, path, via string) *Port {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		path = "/"
	}
	return &Port{Port: int64(port), Public: via == "public", Method: method, Path: path, Via: via}
}

// Checked is a Credential for doors that check access (authentication,
// scopes, ownership) themselves before they can describe the whole action
// (they must, to refuse a caller before reading its body or revealing
// whether a sandbox exists): Identity is the door's authenticated identity
// and Err the result of its check, nil when access was granted.
// CheckedAccess feeds Err to the engine as the access stage, so a refusal
// at the door is decided, and recorded, by the same path as a rule's.
type Checked struct {
	Identity any
	Err      error
}

// CheckedAccess is the access stage for doors that fill Action.Credential
// with a *Checked: it ends the path with Checked.Err. Actions with another
// Credential (or none) pass: their door checked access on its own.
func CheckedAccess() Stage {
	return AccessStage(func(_ context.Context, a *Action) error {
		if c, ok := a.Credential.(*Checked); ok {
			return c.Err
		}
		return nil
	})
}
