package errkind_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"syscall"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/e2b"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/spec"
)

// e2bStatuses are the statuses E2B's API and SDK use, from
// ../shared/protocols/e2b.md (§3.2 control-plane errors, §4.3 proxy, §5.3
// Connect codes, §6 envd REST). The E2B API is not in spec/openapi.yaml, so
// this table stands for its spec.
var e2bStatuses = map[int]string{
	400: "invalid_argument / bad request",
	401: "AuthenticationError",
	403: "permission_denied / forbidden",
	404: "SandboxNotFoundError, NotFoundError",
	409: "wrong state (pause: already paused; connect: changing state)",
	429: "RateLimitError (concurrency or rate limit)",
	499: "canceled",
	500: "internal",
	501: "unimplemented",
	502: "sandbox or port not reachable (proxy)",
	503: "ServiceBusyError / unavailable",
	504: "deadline_exceeded",
	507: "not enough disk space (envd)",
}

// specCodes returns the ErrorCode enum of spec/openapi.yaml and its
// x-status.
func specCodes(t *testing.T) ([]string, map[string]int) {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum   []string       `yaml:"enum"`
					Status map[string]int `yaml:"x-status"`
				} `yaml:"ErrorCode"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(spec.OpenAPI, &doc); err != nil {
		t.Fatalf("parse spec/openapi.yaml: %v", err)
	}
	ec := doc.Components.Schemas.ErrorCode
	if len(ec.Enum) == 0 || len(ec.Status) == 0 {
		t.Fatal("spec/openapi.yaml: no ErrorCode enum or x-status")
	}
	return ec.Enum, ec.Status
}

// TestKindsMappedOnBothAPIs checks, for every Kind, that the native API
// maps it to a code of the spec's ErrorCode enum with the spec's status,
// and that the E2B API maps it to a status E2B uses. A new Kind without a
// row in both tables fails here.
func TestKindsMappedOnBothAPIs(t *testing.T) {
	enum, xstatus := specCodes(t)
	for _, k := range errkind.All() {
		code, ok := apierr.CodeOfKind(k)
		switch {
		case !ok:
			t.Errorf("kind %s: no row in apierr's table", k)
		case !slices.Contains(enum, code):
			t.Errorf("kind %s: native code %q is not in the spec's ErrorCode enum", k, code)
		case apierr.Status(code) != xstatus[code]:
			t.Errorf("kind %s: code %s has status %d, the spec says %d", k, code, apierr.Status(code), xstatus[code])
		}
		st, ok := e2b.StatusOfKind(k)
		if !ok {
			t.Errorf("kind %s: no row in the E2B table", k)
		} else if _, known := e2bStatuses[st]; !known {
			t.Errorf("kind %s: E2B status %d is not one E2B uses", k, st)
		}
	}
	for _, code := range enum {
		if _, ok := xstatus[code]; !ok {
			t.Errorf("spec: code %s has no x-status", code)
		}
	}
}

// TestSameAnswerOnBothAPIs checks the kinds whose meaning both APIs share:
// same status on both (a sandbox that is not running is 409 on both).
func TestSameAnswerOnBothAPIs(t *testing.T) {
	for _, k := range []errkind.Kind{errkind.Internal, errkind.Unauthenticated, errkind.Forbidden,
		errkind.PermissionDenied, errkind.NotFound, errkind.Conflict, errkind.RateLimited,
		errkind.Unavailable, errkind.Timeout} {
		code, _ := apierr.CodeOfKind(k)
		st, _ := e2b.StatusOfKind(k)
		if apierr.Status(code) != st {
			t.Errorf("kind %s: native %d (%s), E2B %d", k, apierr.Status(code), code, st)
		}
	}
}

// TestDomainErrors checks the kinds the domain packages attach, through
// both APIs' tables.
func TestDomainErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		native string
		e2b    int
	}{
		{fmt.Errorf("pause: %w", backend.ErrNotRunning), apierr.CodeConflict, 409},
		{fmt.Errorf("exec: %w", backend.ErrLost), apierr.CodeConflict, 409},
		{&sandbox.StateError{ID: "sb-1", State: sandbox.StateStopped, Want: "running"}, apierr.CodeConflict, 409},
		{fmt.Errorf("%w: sb-1", sandbox.ErrNotFound), apierr.CodeNotFound, 404},
		{fmt.Errorf("%w: cpu_millis must be between 100 and 1024000", sandbox.ErrInvalid), apierr.CodeValidationFailed, 400},
		{fmt.Errorf("%w: 3 sandboxes already running", sandbox.ErrCapacity), apierr.CodeUnavailable, 429},
		{fmt.Errorf("pause: %w", backend.ErrUnsupported), apierr.CodeConflict, 501},
		{auth.ErrRevoked, apierr.CodeUnauthenticated, 401},
		{fmt.Errorf("key: %w", store.ErrNotFound), apierr.CodeNotFound, 404},
		{fmt.Errorf("commit: %w: %w", store.ErrFull, errors.New("database or disk is full")), apierr.CodeUnavailable, 503},
		{fmt.Errorf("write layer: %w", &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), apierr.CodeUnavailable, 503},
		{errors.New("database is locked"), apierr.CodeInternal, 500},
	} {
		e := apierr.From(tc.err)
		k, _ := errkind.Of(tc.err)
		st, _ := e2b.StatusOfKind(k)
		if e.Code != tc.native || st != tc.e2b {
			t.Errorf("%v: native %s, E2B %d; want %s, %d", tc.err, e.Code, st, tc.native, tc.e2b)
		}
		if e.Status == http.StatusInternalServerError && e.Message != "internal error" {
			t.Errorf("%v: internal error with message %q", tc.err, e.Message)
		}
	}
}
