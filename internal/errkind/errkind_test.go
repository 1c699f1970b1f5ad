package errkind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

var (
	errPlain  = New(NotFound, "thing not found")
	errDetail = Sentinel(Invalid, "unknown thing", WithDetail)
	errOnly   = Sentinel(Invalid, "invalid request", DetailOnly)
)

type stateErr struct{}

func (stateErr) Error() string  { return "thing is stopped" }
func (stateErr) Kind() Kind     { return Conflict }
func (stateErr) Public() string { return "thing is stopped; it needs to run" }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind Kind
		msg  string
	}{
		{errPlain, NotFound, "thing not found"},
		{fmt.Errorf("%w: t-1 at /var/lib/x", errPlain), NotFound, "thing not found"},
		{errDetail, Invalid, "unknown thing"},
		{fmt.Errorf("%w: %q", errDetail, "gpu"), Invalid, `unknown thing: "gpu"`},
		{fmt.Errorf("create: %w", fmt.Errorf("%w: %q", errDetail, "gpu")), Invalid, `unknown thing: "gpu"`},
		{fmt.Errorf("%w on backend x", errDetail), Invalid, "unknown thing on backend x"},
		{fmt.Errorf("lookup %q: %w", "gpu", errDetail), Invalid, "unknown thing"},
		{fmt.Errorf("%w: memory_mb must be between 16 and 1048576", errOnly), Invalid, "memory_mb must be between 16 and 1048576"},
		{fmt.Errorf("x: %w", fmt.Errorf("%w: cpu too big", errOnly)), Invalid, "cpu too big"},
		{errOnly, Invalid, "invalid request"},
		{fmt.Errorf("%w: network: %w", errOnly, errPlain), Invalid, "network: thing not found"},
		{fmt.Errorf("%w: %w", errPlain, errDetail), NotFound, "thing not found"},
		{fmt.Errorf("get: %w", stateErr{}), Conflict, "thing is stopped; it needs to run"},
		{Wrap(Unavailable, "agent unavailable", errors.New("dial /run/x: refused")), Unavailable, "agent unavailable"},
		{fmt.Errorf("ctx: %w", Wrap(Timeout, "slow", context.Canceled)), Timeout, "slow"},
		{Mark(fmt.Errorf("%w: FROM x: %w", errDetail, stateErr{}), Forbidden, ""), Forbidden, "unknown thing: FROM x: thing is stopped"},
		{Mark(errors.New("raw"), TooLarge, "too big"), TooLarge, "too big"},
		{Mark(errors.New("raw"), TooLarge, ""), TooLarge, ""},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), Timeout, ""},
		{context.Canceled, Canceled, ""},
		{fmt.Errorf("write: %w", &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), Unavailable, "the daemon's disk is full; free space under its state directory"},
		{fmt.Errorf("open: %w", os.ErrNotExist), NotFound, ""},
		{errors.New("database is locked"), Internal, ""},
		{nil, Internal, ""},
	} {
		k, msg := Of(tc.err)
		if k != tc.kind || msg != tc.msg {
			t.Errorf("Of(%v) = %s %q, want %s %q", tc.err, k, msg, tc.kind, tc.msg)
		}
	}
}

func TestChainsKept(t *testing.T) {
	err := fmt.Errorf("create: %w", fmt.Errorf("%w: x", errOnly))
	if !errors.Is(err, errOnly) {
		t.Error("errors.Is lost the sentinel")
	}
	cause := errors.New("cause")
	if w := Wrap(Unavailable, "msg", cause); !errors.Is(w, cause) || w.Error() != "msg: cause" {
		t.Errorf("Wrap: %v", w)
	}
	if m := Mark(cause, Conflict, "m"); !errors.Is(m, cause) || m.Error() != "cause" {
		t.Errorf("Mark: %v", m)
	}
	if Mark(nil, Conflict, "m") != nil {
		t.Error("Mark(nil) != nil")
	}
}

func TestAll(t *testing.T) {
	seen := map[string]bool{}
	for i, k := range All() {
		if int(k) != i || strings.HasPrefix(k.String(), "kind(") || seen[k.String()] {
			t.Errorf("kind %d: %q", i, k)
		}
		seen[k.String()] = true
	}
	if All()[0] != Internal {
		t.Error("the zero Kind is not Internal")
	}
}
