package store

import "errors"

// Sentinel errors returned by every Store implementation. Callers test them
// with errors.Is; implementations wrap them with context ("sandbox sb-1: not
// found"). The HTTP layer maps them once: ErrNotFound to 404, ErrConflict to
// 409, ErrInvalid to 400.
var (
	// ErrNotFound means the record does not exist, or a record it refers to
	// (for example the principal of a new API key) does not exist.
	ErrNotFound = errors.New("not found")

	// ErrConflict means the write would violate a uniqueness rule (an ID
	// already in use) or an expected-state check failed. UpdateSandbox
	// callbacks return it (wrapped) when the sandbox is not in the state the
	// caller expected.
	ErrConflict = errors.New("conflict")

	// ErrInvalid means an argument is malformed, for example a page token
	// that this store did not issue.
	ErrInvalid = errors.New("invalid argument")
)
