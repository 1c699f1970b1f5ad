package apierr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		err     error
		status  int
		code    string
		message string // exact public message; "" to skip
	}{
		{&sandbox.StateError{ID: "sb-1", State: sandbox.StateStopped, Want: "running"}, 409, CodeConflict, "sandbox sb-1 is stopped; this needs it running"},
		{fmt.Errorf("get: %w", &sandbox.StateError{ID: "sb-1", State: "failed", Want: "running"}), 409, CodeConflict, ""},
		{fmt.Errorf("%w: sb-1", sandbox.ErrNotFound), 404, CodeNotFound, "sandbox not found"},
		{fmt.Errorf("%w: \"gpu\"", sandbox.ErrUnknownTemplate), 422, CodeValidationFailed, `unknown template: "gpu"`},
		{fmt.Errorf("%w: memory_mb must be between 16 and 1048576", sandbox.ErrInvalid), 422, CodeValidationFailed, "memory_mb must be between 16 and 1048576"},
		{fmt.Errorf("%w: 10 sandboxes already running", sandbox.ErrCapacity), 503, CodeUnavailable, ""},
		{fmt.Errorf("pause: %w", backend.ErrUnsupported), 409, CodeConflict, ""},
		{auth.ErrRevoked, 401, CodeUnauthenticated, "missing or invalid API key"},
		{auth.ErrNoCredentials, 401, CodeUnauthenticated, "missing or invalid API key"},
		{fmt.Errorf("key x: %w", store.ErrNotFound), 404, CodeNotFound, "not found"},
		{fmt.Errorf("dup: %w", store.ErrConflict), 409, CodeConflict, ""},
		{fmt.Errorf("token: %w", store.ErrInvalid), 400, CodeBadRequest, ""},
		{&http.MaxBytesError{Limit: 10}, 413, CodePayloadTooLarge, "request body too large"},
		{audit.ErrClosed, 503, CodeUnavailable, "audit log closed: the daemon is shutting down"},
		{&agentclient.HTTPError{Status: 404, Message: `{"code":404,"message":"open /x: no such file or directory"}`}, 404, CodeNotFound, "open /x: no such file or directory"},
		{&agentclient.HTTPError{Status: 403, Message: `{"code":403,"message":"open /root/x: permission denied"}`}, 403, CodePermissionDenied, "in the sandbox: open /root/x: permission denied"},
		{&agentclient.HTTPError{Status: 400, Message: `{"code":400,"message":"tar entry \"../x\" escapes"}`}, 400, CodeBadRequest, `tar entry "../x" escapes`},
		{&agentclient.HTTPError{Status: 401, Message: `{"code":401,"message":"unknown user bob"}`}, 400, CodeBadRequest, "unknown user bob"},
		{&agentclient.HTTPError{Status: 409, Message: `{}`}, 409, CodeConflict, "conflict"},
		{&agentclient.HTTPError{Status: 416, Message: `{"code":416,"message":"invalid range"}`}, 400, CodeBadRequest, "invalid range"},
		{&agentclient.HTTPError{Status: 507, Message: `{"code":507,"message":"sandbox disk is full (limit 1024 MiB)"}`}, 413, CodePayloadTooLarge, "sandbox disk is full (limit 1024 MiB)"},
		{&agentclient.HTTPError{Status: 500, Message: `{"code":500,"message":"/var/lib/secret host path"}`}, 500, CodeInternal, "internal error"},
		{context.DeadlineExceeded, 504, CodeTimeout, ""},
		{errors.New("open /var/lib/warden/warden.db: disk I/O error"), 500, CodeInternal, "internal error"},
		{BadRequest("x %d", 1), 400, CodeBadRequest, "x 1"},
		{fmt.Errorf("wrapped: %w", NotFound("sandbox %s not found", "sb-9")), 404, CodeNotFound, "sandbox sb-9 not found"},
		{Validation("bad \xff value"), 422, CodeValidationFailed, "bad \uFFFD value"},
	} {
		e := From(tc.err)
		if e.Status != tc.status || e.Code != tc.code || (tc.message != "" && e.Message != tc.message) {
			t.Errorf("From(%v) = %d %s %q, want %d %s %q", tc.err, e.Status, e.Code, e.Message, tc.status, tc.code, tc.message)
		}
		if Status(e.Code) != e.Status {
			t.Errorf("From(%v): code %s with status %d", tc.err, e.Code, e.Status)
		}
		if !errors.Is(e, tc.err) && !errors.Is(tc.err, e) {
			t.Errorf("From(%v) lost its cause", tc.err)
		}
	}
	if From(nil) != nil {
		t.Error("From(nil) != nil")
	}
}

func TestMessageBounded(t *testing.T) {
	e := BadRequest("%s", strings.Repeat("é", 2000))
	if len(e.Message) > maxMessage+3 || !strings.HasSuffix(e.Message, "...") || !strings.HasPrefix(e.Message, "é") {
		t.Errorf("message of %d bytes", len(e.Message))
	}
}

func TestWrite(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := httptest.NewRequest("GET", "/v1/x", nil)
	r = r.WithContext(NewContext(r.Context(), "req-42", log))

	w := httptest.NewRecorder()
	w.Header().Set("Content-Length", "99")
	Write(w, r, fmt.Errorf("query: %w", errors.New("database is locked at /var/lib/warden/warden.db")))
	if w.Code != 500 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Content-Length") != "" {
		t.Fatalf("response %d %v", w.Code, w.Header())
	}
	var body Body
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error != (BodyError{Code: CodeInternal, Message: "internal error", RequestID: "req-42"}) {
		t.Errorf("body = %+v", body)
	}
	if strings.Contains(w.Body.String(), "/var/lib") {
		t.Error("internal cause leaked to the caller")
	}
	if n := strings.Count(logs.String(), "request failed"); n != 1 || !strings.Contains(logs.String(), "req-42") || !strings.Contains(logs.String(), "database is locked") {
		t.Errorf("log (%d lines): %s", n, logs.String())
	}

	w = httptest.NewRecorder()
	Write(w, r, auth.ErrRevoked)
	if w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" || strings.Contains(w.Body.String(), "revoked") {
		t.Errorf("401: %d %v %s", w.Code, w.Header(), w.Body.String())
	}
}
