package cli

import (
	"io"
	"os"
	"strconv"

	"golang.org/x/term"
)

// Terminal is the local terminal of `warden exec -t`.
type Terminal interface {
	// Size returns the terminal's width and height in characters.
	Size() (cols, rows int, err error)
	// MakeRaw puts the terminal in raw mode and returns the function that restores it.
	MakeRaw() (restore func(), err error)
	// NotifyResize calls f (on another goroutine) each time the terminal's size changes,
	// until stop is called.
	NotifyResize(f func()) (stop func())
}

// stdinTerminal returns the terminal on stdin, or nil when stdin is not a terminal.
func stdinTerminal(stdin io.Reader, stdout io.Writer) Terminal {
	in, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return nil
	}
	t := &osTerminal{in: in, sizeFd: int(in.Fd())}
	if out, ok := stdout.(*os.File); ok && term.IsTerminal(int(out.Fd())) {
		t.sizeFd = int(out.Fd())
	}
	return t
}

// osTerminal is a real terminal device.
type osTerminal struct {
	in     *os.File
	sizeFd int
}

func (t *osTerminal) Size() (int, int, error) { return term.GetSize(t.sizeFd) }

func (t *osTerminal) MakeRaw() (func(), error) {
	st, err := term.MakeRaw(int(t.in.Fd()))
	if err != nil {
		return nil, err
	}
	return func() { _ = term.Restore(int(t.in.Fd()), st) }, nil
}

func (t *osTerminal) NotifyResize(f func()) func() { return notifyWinch(f) }

// terminalSize returns the size of t, else $COLUMNS x $LINES, else 80x24.
func terminalSize(t Terminal, getenv func(string) string) (cols, rows int) {
	if t != nil {
		if c, r, err := t.Size(); err == nil && c > 0 && r > 0 {
			return c, r
		}
	}
	cols, rows = 80, 24
	if c, err := strconv.Atoi(getenv("COLUMNS")); err == nil && c > 0 {
		cols = c
	}
	if r, err := strconv.Atoi(getenv("LINES")); err == nil && r > 0 {
		rows = r
	}
	return cols, rows
}
