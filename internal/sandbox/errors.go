package sandbox

import (
	"errors"
	"fmt"
)

// Lifecycle errors. The API maps them to HTTP status codes in one place.
var (
	ErrNotFound        = errors.New("sandbox not found")
	ErrInvalid         = errors.New("invalid request")
	ErrUnknownTemplate = errors.New("unknown template")
	ErrCapacity        = errors.New("no capacity")
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
