package sandbox

import (
	"fmt"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// Lifecycle errors. They carry their kind (internal/errkind), which each API
// maps to its status codes in one table. The detail written after
// ErrInvalid, ErrUnknownTemplate, ErrNoNetwork and ErrNotReady
// (fmt.Errorf("%w: detail", ErrInvalid)) is shown to callers; ErrInvalid
// shows the detail alone.
var (
	ErrNotFound        = errkind.New(errkind.NotFound, "sandbox not found")
	ErrInvalid         = errkind.Sentinel(errkind.Invalid, "invalid request", errkind.DetailOnly)
	ErrUnknownTemplate = errkind.Sentinel(errkind.Invalid, "unknown template", errkind.WithDetail)
	ErrCapacity        = errkind.New(errkind.Exhausted, "no capacity for another sandbox; try again later")
)

// StateError is returned when a sandbox is in the wrong state for a call
// (HTTP 409).
type StateError struct {
	ID    string
	State State
	Want  string // what the call needed, e.g. "running"
}

func (e *StateError) Error() string {
	return fmt.Sprintf("sandbox %s is %s; this needs it %s", e.ID, e.State, e.Want)
}

// Kind makes a StateError a conflict (errkind.Kinded).
func (e *StateError) Kind() errkind.Kind { return errkind.Conflict }

// Public returns the message callers see: all of it.
func (e *StateError) Public() string { return e.Error() }
