package e2b

import (
	"errors"
	"net/http"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// e2bAnswer is E2B's answer to one kind of error: the HTTP status (also
// the body's "code"), and the message used when the error's source made
// none public, or always where fixed.
type e2bAnswer struct {
	status int
	msg    string
	fixed  bool
}

// e2bKinds maps every errkind.Kind to E2B's answer: the one table of this
// API (the native API has its own in internal/api/apierr). The statuses
// are those E2B's API and SDK use (../shared/protocols/e2b.md §3.2, §5.3);
// a sandbox in the wrong state is 409 on both APIs.
var e2bKinds = map[errkind.Kind]e2bAnswer{
	errkind.Internal:         {http.StatusInternalServerError, "internal error", true},
	errkind.Malformed:        {http.StatusBadRequest, "bad request", false},
	errkind.Invalid:          {http.StatusBadRequest, "invalid request", false},
	errkind.Unauthenticated:  {http.StatusUnauthorized, "Invalid API key", true},
	errkind.Forbidden:        {http.StatusForbidden, "forbidden", false},
	errkind.PermissionDenied: {http.StatusForbidden, "permission denied", false},
	errkind.NotFound:         {http.StatusNotFound, "not found", false},
	errkind.Conflict:         {http.StatusConflict, "conflict", false},
	errkind.Unsupported:      {http.StatusNotImplemented, "not supported by this Warden backend", false},
	errkind.TooLarge:         {http.StatusBadRequest, "too large", false},
	errkind.Exhausted:        {http.StatusTooManyRequests, "no capacity; try again later", false},
	errkind.RateLimited:      {http.StatusTooManyRequests, "too many requests; try again later", false},
	errkind.Unavailable:      {http.StatusServiceUnavailable, "service unavailable; try again later", false},
	errkind.Timeout:          {http.StatusGatewayTimeout, "the sandbox did not answer in time", false},
	errkind.Canceled:         {499, "request canceled", false},
}

// StatusOfKind returns the HTTP status of errors of kind k on the E2B API;
// ok is false for a kind the table lacks (such errors get 500).
func StatusOfKind(k errkind.Kind) (status int, ok bool) {
	a, ok := e2bKinds[k]
	return a.status, ok
}

// toAPIError maps Warden's errors to E2B's: an *apiError in the chain
// wins, else the error's kind through e2bKinds.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	k, msg := errkind.Of(err)
	a, ok := e2bKinds[k]
	if !ok {
		a = e2bKinds[errkind.Internal]
	}
	if a.fixed || msg == "" {
		msg = a.msg
	}
	return &apiError{status: a.status, message: msg, cause: err}
}
