// Package errkind classifies errors by kind where they arise, so that each
// API maps them to its wire format through one table (internal/api/apierr
// for the native API, internal/e2b for the E2B API).
//
// Domain code attaches a Kind, and the message a caller may see, to the
// error it returns: a sentinel made here carries both, so every error that
// wraps it with %w inherits them (errors.Is on the sentinel keeps working);
// Wrap and Mark attach them to any error; a type with Kind and Public
// methods (Kinded) carries its own. Of finds them again.
//
// A sentinel's Detail says whether the text that the source wrote around
// it is public: with WithDetail, fmt.Errorf("%w: no such tag", ErrX) is
// shown as the whole text, "x: no such tag"; with DetailOnly as "no such
// tag"; with NoDetail as the sentinel's own text only. Context added by
// callers further out ("create sandbox: ...") is never shown.
//
// The package depends on the standard library only.
package errkind

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
)

// Kind is the class of an error, as callers of any API see it.
type Kind uint8

// The kinds. Internal, the zero Kind, is anything unexpected; its message is
// never shown.
const (
	Internal         Kind = iota // an unexpected failure of the daemon
	Malformed                    // the request is malformed (bad parameter, foreign page token)
	Invalid                      // the request is well formed but a value is out of range or unusable
	Unauthenticated              // no credentials, or bad ones
	Forbidden                    // the caller may not do this
	PermissionDenied             // inside the sandbox, permissions refuse the sandbox user
	NotFound                     // the object does not exist (or is not the caller's)
	Conflict                     // the object is in the wrong state for the call
	Unsupported                  // the sandbox's backend cannot do this
	TooLarge                     // the request or what it writes is over a limit
	Exhausted                    // no capacity for another (sandbox); try again later
	RateLimited                  // too many requests from the caller
	Unavailable                  // the daemon, the backend or the agent cannot serve now
	Timeout                      // the agent or the backend did not answer in time
	Canceled                     // the request was canceled
	numKinds
)

var names = [numKinds]string{
	Internal: "internal", Malformed: "malformed", Invalid: "invalid",
	Unauthenticated: "unauthenticated", Forbidden: "forbidden",
	PermissionDenied: "permission_denied", NotFound: "not_found", Conflict: "conflict",
	Unsupported: "unsupported", TooLarge: "too_large", Exhausted: "exhausted",
	RateLimited: "rate_limited", Unavailable: "unavailable", Timeout: "timeout",
	Canceled: "canceled",
}

// All returns every Kind, for tests that check a mapping is complete.
func All() []Kind {
	out := make([]Kind, numKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

func (k Kind) String() string {
	if k < numKinds && names[k] != "" {
		return names[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Detail says how much of the text around a sentinel is public.
type Detail uint8

const (
	// NoDetail: only the sentinel's text is shown.
	NoDetail Detail = iota
	// WithDetail: the text of the error that wraps the sentinel first, when
	// it starts with the sentinel's text ("unknown template: \"gpu\"").
	WithDetail
	// DetailOnly: as WithDetail, less the sentinel's text and ": "
	// ("memory_mb must be ..." for "invalid request: memory_mb must be ...").
	DetailOnly
)

// Kinded is an error type that carries its own kind and public message.
type Kinded interface {
	error
	Kind() Kind
	Public() string
}

// Error is an error with a kind and a public message. Make one with New,
// Sentinel, Wrap or Mark.
type Error struct {
	kind   Kind
	text   string // Error() without the cause; "" for Mark
	public string // "" means: what Of finds in cause
	detail Detail
	cause  error
	mark   bool // Error() is cause's text
}

// New returns a sentinel of kind k whose text msg is public; the text
// around it is not (NoDetail).
func New(k Kind, msg string) *Error { return Sentinel(k, msg, NoDetail) }

// Sentinel returns a sentinel of kind k whose text msg is public, and the
// detail written around it as d says.
func Sentinel(k Kind, msg string, d Detail) *Error {
	return &Error{kind: k, text: msg, public: msg, detail: d}
}

// Wrap returns an error of kind k with the public message msg and the
// private cause; its text is "msg: cause".
func Wrap(k Kind, msg string, cause error) *Error {
	return &Error{kind: k, text: msg, public: msg, cause: cause}
}

// Mark returns err with kind k and the public message msg, its text
// unchanged. With msg "" the message is the one Of finds in err, if any.
func Mark(err error, k Kind, msg string) error {
	if err == nil {
		return nil
	}
	return &Error{kind: k, public: msg, cause: err, mark: true}
}

func (e *Error) Error() string {
	switch {
	case e.mark:
		return e.cause.Error()
	case e.cause != nil:
		return e.text + ": " + e.cause.Error()
	}
	return e.text
}

func (e *Error) Unwrap() error { return e.cause }

// Kind returns e's kind.
func (e *Error) Kind() Kind { return e.kind }

// Public returns e's own public message.
func (e *Error) Public() string { return e.public }

// Of returns the kind of err and the message its source made public ("" if
// none: the API then uses its own words for the kind). The first kinded
// error of the chain, outermost first as errors.As searches, decides. Where
// none is, a few standard errors have a kind (context deadlines and
// cancellations, ENOSPC, fs.ErrNotExist); anything else is Internal.
func Of(err error) (Kind, string) {
	if err == nil {
		return Internal, ""
	}
	if k, msg, ok := find(err, nil); ok {
		return k, msg
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout, ""
	case errors.Is(err, context.Canceled):
		return Canceled, ""
	case errors.Is(err, syscall.ENOSPC):
		return Unavailable, "the daemon's disk is full; free space under its state directory"
	case errors.Is(err, fs.ErrNotExist):
		return NotFound, ""
	}
	return Internal, ""
}

// find walks err's chain depth first; parent is the error that wrapped err.
func find(err, parent error) (Kind, string, bool) {
	if ke, ok := err.(Kinded); ok {
		e, ok := ke.(*Error)
		if !ok {
			return ke.Kind(), ke.Public(), true
		}
		if e.mark && e.public == "" {
			_, msg, _ := find(e.cause, e)
			return e.kind, msg, true
		}
		return e.kind, e.message(parent), true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if next := u.Unwrap(); next != nil {
			return find(next, err)
		}
	case interface{ Unwrap() []error }:
		for _, next := range u.Unwrap() {
			if next == nil {
				continue
			}
			if k, msg, ok := find(next, err); ok {
				return k, msg, true
			}
		}
	}
	return Internal, "", false
}

// message is the public message of e reached from parent.
func (e *Error) message(parent error) string {
	if e.detail == NoDetail || e.cause != nil || parent == nil {
		return e.public
	}
	full := parent.Error()
	if !strings.HasPrefix(full, e.text) {
		// Not written around e at its source ("template x: unknown template").
		return e.public
	}
	if e.detail == DetailOnly {
		if rest, ok := strings.CutPrefix(full[len(e.text):], ": "); ok && rest != "" {
			return rest
		}
		return e.public
	}
	return full
}
