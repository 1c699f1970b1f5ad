package govern

import "context"

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
