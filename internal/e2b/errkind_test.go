package e2b

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// TestToAPIError checks E2B's answers to Warden's errors, through the kinds
// their sources attach.
func TestToAPIError(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{errf(409, "sandbox %q is already paused", "x"), 409, `sandbox "x" is already paused`},
		{fmt.Errorf("pause: %w", backend.ErrNotRunning), 409, "sandbox is not running"},
		{&sandbox.StateError{ID: "sb-1", State: sandbox.StateStopped, Want: "running"}, 409, "sandbox sb-1 is stopped; this needs it running"},
		{fmt.Errorf("create: %w", fmt.Errorf("%w: timeout must be between 1s and 24h0m0s", sandbox.ErrInvalid)), 400, "timeout must be between 1s and 24h0m0s"},
		{fmt.Errorf("create: %w", fmt.Errorf("%w: %q", sandbox.ErrUnknownTemplate, "gpu")), 400, `unknown template: "gpu"`},
		{fmt.Errorf("%w: 3 sandboxes already running", sandbox.ErrCapacity), 429, "no capacity for another sandbox; try again later"},
		{fmt.Errorf("get: %w", sandbox.ErrNotFound), 404, "sandbox not found"},
		{fmt.Errorf("template: %w", store.ErrNotFound), 404, "not found"},
		{auth.ErrRevoked, 401, "Invalid API key"},
		{fmt.Errorf("pause: %w", backend.ErrUnsupported), 501, "not supported by this backend"},
		{context.Canceled, 499, "request canceled"},
		{errors.New("open /var/lib/warden/x: disk I/O error"), 500, "internal error"},
	} {
		e := toAPIError(tc.err)
		if e.status != tc.status || e.message != tc.msg {
			t.Errorf("toAPIError(%v) = %d %q, want %d %q", tc.err, e.status, e.message, tc.status, tc.msg)
		}
	}
}
