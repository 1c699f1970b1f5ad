// Package apierr is the error type of the Warden HTTP API and the one place
// that turns any error into an HTTP error response.
//
// An *Error keeps what the caller may see (Status, Code, Message) apart from
// the internal cause (Err), which is logged with the request ID and never
// sent (the tailscale vizerror and caddy APIError pattern). Handlers return
// plain errors; From classifies them: an *Error anywhere in the chain wins,
// then the request-body limit, then the error's kind (internal/errkind,
// attached where the error arose: domain sentinels, agent errors, contexts)
// through one table, kinds, with the public message its source attached.
// Anything without a kind is a 500 "internal" whose message says only
// "internal error"; its cause is logged once by Write or Report.
//
// Every code has exactly one HTTP status, as the ErrorCode schema of
// spec/openapi.yaml says.
package apierr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// Stable error codes (the ErrorCode schema).
const (
	CodeBadRequest       = "bad_request"
	CodeInvalidJSON      = "invalid_json"
	CodeValidationFailed = "validation_failed"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	// CodePermissionDenied is the sandbox's own permissions refusing a file
	// or program to the sandbox user (EACCES/EPERM inside), not the caller's key.
	CodePermissionDenied = "permission_denied"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodePayloadTooLarge  = "payload_too_large"
	CodeRateLimited      = "rate_limited"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
	CodeTimeout          = "timeout"
	CodeBadGateway       = "bad_gateway"
	// CodeApprovalRequired is a governance rule holding the action until
	// a principal approves it (docs/governance.md); the body names the
	// approval (approval_id).
	CodeApprovalRequired = "approval_required"
)

// statusOf is the HTTP status of every code (x-status in the spec).
var statusOf = map[string]int{
	CodeBadRequest:       http.StatusBadRequest,
	CodeInvalidJSON:      http.StatusBadRequest,
	CodeValidationFailed: http.StatusUnprocessableEntity,
	CodeUnauthenticated:  http.StatusUnauthorized,
	CodeForbidden:        http.StatusForbidden,
	CodePermissionDenied: http.StatusForbidden,
	CodeNotFound:         http.StatusNotFound,
	CodeConflict:         http.StatusConflict,
	CodePayloadTooLarge:  http.StatusRequestEntityTooLarge,
	CodeRateLimited:      http.StatusTooManyRequests,
	CodeUnavailable:      http.StatusServiceUnavailable,
	CodeInternal:         http.StatusInternalServerError,
	CodeTimeout:          http.StatusGatewayTimeout,
	CodeBadGateway:       http.StatusBadGateway,
	CodeApprovalRequired: http.StatusForbidden,
}

// Status returns the HTTP status of a code, 500 for an unknown one.
func Status(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// maxMessage bounds a public message; longer ones are cut.
const maxMessage = 1024

// Error is an API error: what the caller sees and, separately, why.
type Error struct {
	Status  int    // HTTP status, fixed by Code
	Code    string // one of the Code constants
	Message string // safe to show to the caller
	Err     error  // internal cause; logged, never sent
	// ApprovalID is the approval an approval_required error waits for.
	ApprovalID string
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an error with the given code and public message.
func New(code, msg string) *Error {
	return &Error{Status: Status(code), Code: code, Message: clean(msg)}
}

// Wrap returns an error with the given code and public message, keeping
// cause for the log.
func Wrap(code, msg string, cause error) *Error {
	e := New(code, msg)
	e.Err = cause
	return e
}

// BadRequest is a 400 bad_request: a malformed parameter or a missing field.
func BadRequest(format string, args ...any) *Error {
	return New(CodeBadRequest, fmt.Sprintf(format, args...))
}

// InvalidJSON is a 400 invalid_json: the body is not valid JSON.
func InvalidJSON(format string, args ...any) *Error {
	return New(CodeInvalidJSON, fmt.Sprintf(format, args...))
}

// Validation is a 422 validation_failed: a well-formed value out of range.
func Validation(format string, args ...any) *Error {
	return New(CodeValidationFailed, fmt.Sprintf(format, args...))
}

// Unauthenticated is a 401 with the one message every authentication
// failure gets, so callers cannot tell which check failed.
func Unauthenticated(cause error) *Error {
	return Wrap(CodeUnauthenticated, "missing or invalid API key", cause)
}

// Forbidden is a 403 forbidden.
func Forbidden(format string, args ...any) *Error {
	return New(CodeForbidden, fmt.Sprintf(format, args...))
}

// NotFound is a 404 not_found.
func NotFound(format string, args ...any) *Error {
	return New(CodeNotFound, fmt.Sprintf(format, args...))
}

// Conflict is a 409 conflict.
func Conflict(format string, args ...any) *Error {
	return New(CodeConflict, fmt.Sprintf(format, args...))
}

// PayloadTooLarge is a 413 payload_too_large.
func PayloadTooLarge(msg string) *Error { return New(CodePayloadTooLarge, msg) }

// Unavailable is a 503 unavailable.
func Unavailable(msg string, cause error) *Error { return Wrap(CodeUnavailable, msg, cause) }

// Timeout is a 504 timeout.
func Timeout(msg string, cause error) *Error { return Wrap(CodeTimeout, msg, cause) }

// Internal is a 500 internal with the generic message.
func Internal(cause error) *Error { return Wrap(CodeInternal, "internal error", cause) }

// answer is the native API's answer to one kind of error: its code, and
// the message used when the error's source made none public, or always
// where fixed.
type answer struct {
	code  string
	msg   string
	fixed bool
}

// kinds maps every errkind.Kind to its code: the one table of this API
// (the E2B API has its own in internal/e2b). A sandbox in the wrong state
// (Conflict) is 409 on both.
var kinds = map[errkind.Kind]answer{
	errkind.Internal:         {CodeInternal, "internal error", true},
	errkind.Malformed:        {CodeBadRequest, "bad request", false},
	errkind.Invalid:          {CodeValidationFailed, "invalid request", false},
	errkind.Unauthenticated:  {CodeUnauthenticated, "missing or invalid API key", true},
	errkind.Forbidden:        {CodeForbidden, "forbidden", false},
	errkind.PermissionDenied: {CodePermissionDenied, "in the sandbox: permission denied", false},
	errkind.NotFound:         {CodeNotFound, "not found", false},
	errkind.Conflict:         {CodeConflict, "conflict with the current state", false},
	errkind.Unsupported:      {CodeConflict, "not supported by this sandbox's backend", false},
	errkind.TooLarge:         {CodePayloadTooLarge, "too large", false},
	errkind.Exhausted:        {CodeUnavailable, "no capacity; try again later", false},
	errkind.RateLimited:      {CodeRateLimited, "too many requests; try again later", false},
	errkind.Unavailable:      {CodeUnavailable, "unavailable; try again later", false},
	errkind.Timeout:          {CodeTimeout, "sandbox agent or backend did not answer in time", false},
	errkind.Canceled:         {CodeUnavailable, "request canceled", false},
}

// CodeOfKind returns the code of errors of kind k; ok is false for a kind
// the table lacks (such errors get "internal").
func CodeOfKind(k errkind.Kind) (code string, ok bool) {
	a, ok := kinds[k]
	return a.code, ok
}

// From classifies err. It never returns nil for a non-nil err; the result
// keeps err as its cause.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		if ae.Err == nil && ae != err {
			// Keep the context the wrappers added for the log.
			cp := *ae
			cp.Err = err
			return &cp
		}
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return Wrap(CodePayloadTooLarge, "request body too large", err)
	}
	k, msg := errkind.Of(err)
	a, ok := kinds[k]
	if !ok {
		a = kinds[errkind.Internal]
	}
	if a.fixed || msg == "" {
		msg = a.msg
	}
	return Wrap(a.code, msg, err)
}

// clean makes a public message valid UTF-8 of bounded size.
func clean(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	return msg
}

type ctxKey struct{}

type reqInfo struct {
	id  string
	log *slog.Logger
}

// NewContext returns ctx carrying the request ID and the logger Write and
// Report use.
func NewContext(ctx context.Context, requestID string, log *slog.Logger) context.Context {
	return context.WithValue(ctx, ctxKey{}, reqInfo{id: requestID, log: log})
}

// RequestID returns the request ID stored by NewContext, or "".
func RequestID(ctx context.Context) string {
	ri, _ := ctx.Value(ctxKey{}).(reqInfo)
	return ri.id
}

func logger(ctx context.Context) *slog.Logger {
	if ri, ok := ctx.Value(ctxKey{}).(reqInfo); ok && ri.log != nil {
		return ri.log
	}
	return slog.Default()
}

// Report classifies err and logs it once: server errors (5xx) at error
// level with their cause, client errors at debug level. Use it when the
// response can no longer carry an error body (a stream that has begun);
// otherwise use Write.
func Report(r *http.Request, err error) *Error {
	e := From(err)
	if e == nil {
		return nil
	}
	ctx := r.Context()
	log := logger(ctx)
	attrs := []any{"request_id", RequestID(ctx), "method", r.Method, "path", r.URL.Path,
		"status", e.Status, "code", e.Code}
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		log.Debug("request canceled by the client", append(attrs, "err", err)...)
	case e.Status >= 500 && e.Code != CodeBadGateway:
		// bad_gateway is about a program in a sandbox (nothing listens on
		// the proxied port), not the daemon: logged like a refusal.
		log.Error("request failed", append(attrs, "err", err)...)
	default:
		log.Debug("request refused", append(attrs, "err", err)...)
	}
	return e
}

// Body is the JSON error body of every 4xx and 5xx response.
type Body struct {
	Error BodyError `json:"error"`
}

// BodyError is the "error" member of Body.
type BodyError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
	// ApprovalID is set on approval_required errors.
	ApprovalID string `json:"approval_id,omitempty"`
}

// Write turns err into the JSON error response and logs it once (Report).
// It is the only place an error response is written.
func Write(w http.ResponseWriter, r *http.Request, err error) {
	if e := Report(r, err); e != nil {
		Respond(w, r, e)
	}
}

// Respond writes e as the JSON error response without logging it; for
// callers that logged the cause themselves (panic recovery).
func Respond(w http.ResponseWriter, r *http.Request, e *Error) {
	id := RequestID(r.Context())
	h := w.Header()
	for _, k := range []string{"Content-Encoding", "Content-Length", "Content-Range", "Content-Disposition", "Last-Modified", "Accept-Ranges", "Etag"} {
		h.Del(k)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if e.Code == CodeUnauthenticated {
		h.Set("WWW-Authenticate", `Bearer realm="warden"`)
	}
	w.WriteHeader(e.Status)
	b, _ := json.Marshal(Body{Error: BodyError{Code: e.Code, Message: e.Message, RequestID: id, ApprovalID: e.ApprovalID}})
	w.Write(append(b, '\n'))
}
