package store

import (
	"fmt"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// Sentinel errors returned by every Store implementation. Callers test them
// with errors.Is; implementations wrap them with context ("sandbox sb-1: not
// found"). They carry their kind (internal/errkind), which each API maps to
// its status codes in one table: ErrNotFound to 404, ErrConflict to 409,
// ErrInvalid to 400, ErrFull to 503.
var (
	// ErrNotFound means the record does not exist, or a record it refers to
	// (for example the principal of a new API key) does not exist.
	ErrNotFound = errkind.New(errkind.NotFound, "not found")

	// ErrConflict means the write would violate a uniqueness rule (an ID
	// already in use) or an expected-state check failed. UpdateSandbox
	// callbacks return it (wrapped) when the sandbox is not in the state the
	// caller expected.
	ErrConflict = errkind.New(errkind.Conflict, "conflict")

	// ErrInvalid means an argument is malformed, for example a page token
	// that this store did not issue.
	ErrInvalid = errkind.New(errkind.Malformed, "invalid argument")

	// ErrFull means the write did not fit: the disk (or filesystem) that
	// holds the store is full.
	ErrFull = errkind.New(errkind.Unavailable, "the daemon's state storage is full; free space under its state directory")
)

// ErrNameInUse means a sandbox's name is already used by a live sandbox of
// the same owner (see Sandbox.Name). It wraps ErrConflict.
var ErrNameInUse = fmt.Errorf("name in use: %w", ErrConflict)
