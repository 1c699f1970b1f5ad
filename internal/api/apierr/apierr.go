// Package apierr is the error type of the Warden HTTP API and the one place
// that turns any error into an HTTP error response.
//
// An *Error keeps what the caller may see (Status, Code, Message) apart from
// the internal cause (Err), which is logged with the request ID and never
// sent (the tailscale vizerror and caddy APIError pattern). Handlers return
// plain errors; From classifies them: an *Error anywhere in the chain wins,
// then the domain sentinels (sandbox, store, auth, backend), agent errors
// (Connect codes and HTTP statuses of warden-agent), request-body limits and
// contexts. Anything else is a 500 "internal" whose message says only
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
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/build"
	"github.com/warden-sandbox/warden/internal/image"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
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
	var se *sandbox.StateError
	var mbe *http.MaxBytesError
	var he *agentclient.HTTPError
	var ce *connect.Error
	var ue *url.Error
	switch {
	case errors.As(err, &se):
		return Wrap(CodeConflict, se.Error(), err)
	case errors.Is(err, sandbox.ErrNotFound):
		return Wrap(CodeNotFound, "sandbox not found", err)
	case errors.Is(err, sandbox.ErrUnknownTemplate), errors.Is(err, template.ErrUnknown):
		return Wrap(CodeValidationFailed, fromSentinel(err, sandbox.ErrUnknownTemplate.Error()), err)
	case errors.Is(err, sandbox.ErrInvalid):
		return Wrap(CodeValidationFailed, publicTail(err, "invalid request"), err)
	case errors.Is(err, sandbox.ErrNoNetwork):
		return Wrap(CodeValidationFailed, fromFirst(err, sandbox.ErrNoNetwork.Error()), err)
	case errors.Is(err, sandbox.ErrNotReady):
		return Wrap(CodeValidationFailed, fromFirst(err, sandbox.ErrNotReady.Error()), err)
	// Image pulls and imports, directly or in a build's FROM. Their
	// messages never quote a registry's response, so they are shown.
	case errors.Is(err, image.ErrRegistryDenied):
		return Wrap(CodeForbidden, imageMessage(err), err)
	case errors.Is(err, image.ErrLimit):
		return Wrap(CodePayloadTooLarge, imageMessage(err), err)
	case errors.Is(err, build.ErrBuild):
		return Wrap(CodeValidationFailed, fromFirst(err, build.ErrBuild.Error()), err)
	case errors.Is(err, template.ErrInvalidName):
		return Wrap(CodeValidationFailed, fromFirst(err, template.ErrInvalidName.Error()), err)
	case errors.Is(err, template.ErrBuiltin):
		return Wrap(CodeConflict, fromFirst(err, template.ErrBuiltin.Error()), err)
	case errors.Is(err, template.ErrNotOwner):
		return Wrap(CodeForbidden, fromFirst(err, template.ErrNotOwner.Error()), err)
	case errors.Is(err, sandbox.ErrCapacity):
		return Wrap(CodeUnavailable, "no capacity for another sandbox; try again later", err)
	case errors.Is(err, backend.ErrUnsupported):
		return Wrap(CodeConflict, "not supported by this sandbox's backend", err)
	case errors.Is(err, backend.ErrNotRunning), errors.Is(err, backend.ErrLost):
		return Wrap(CodeConflict, "sandbox is not running", err)
	case errors.Is(err, auth.ErrUnauthenticated):
		return Unauthenticated(err)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, backend.ErrNotFound):
		return Wrap(CodeNotFound, "not found", err)
	case errors.Is(err, store.ErrConflict):
		return Wrap(CodeConflict, "conflict with the current state", err)
	case errors.Is(err, store.ErrInvalid):
		return Wrap(CodeBadRequest, "invalid argument (for example a page token this daemon did not issue)", err)
	case errors.As(err, &mbe):
		return Wrap(CodePayloadTooLarge, "request body too large", err)
	case errors.Is(err, audit.ErrClosed):
		return Wrap(CodeUnavailable, "daemon is shutting down", err)
	case errors.As(err, &he):
		return fromAgentHTTP(he, err)
	case errors.As(err, &ce):
		return fromConnect(ce, err)
	case errors.Is(err, context.DeadlineExceeded):
		return Wrap(CodeTimeout, "sandbox agent or backend did not answer in time", err)
	case errors.Is(err, context.Canceled):
		return Wrap(CodeUnavailable, "request canceled", err)
	case errors.As(err, &ue):
		return Wrap(CodeUnavailable, "sandbox agent unavailable", err)
	case errors.Is(err, fs.ErrNotExist):
		return Wrap(CodeNotFound, "not found", err)
	case errors.Is(err, syscall.ENOSPC), strings.Contains(err.Error(), "database or disk is full"):
		return Wrap(CodeUnavailable, "the daemon's state storage is full; free space under its state directory", err)
	}
	return Internal(err)
}

// publicTail returns the part of err's message after the sentinel's text
// ("invalid request: cpu_millis must be ..." -> "cpu_millis must be ..."),
// or def. Domain packages write these tails for callers.
func publicTail(err error, def string) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, def+": "); i >= 0 {
		return msg[i+len(def)+2:]
	}
	return def
}

// imageMessage is the message of an image error: from the build sentinel
// on when a build's FROM failed, else all of it.
func imageMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, build.ErrBuild.Error()); i >= 0 {
		return msg[i:]
	}
	return msg
}

// fromFirst returns err's message from the first occurrence of the
// sentinel's text on, for messages that may quote output containing it.
func fromFirst(err error, sentinel string) string {
	msg := err.Error()
	if i := strings.Index(msg, sentinel); i >= 0 {
		return msg[i:]
	}
	return sentinel
}

// fromSentinel returns err's message from the sentinel's text on
// ("start: unknown template: \"x\"" -> "unknown template: \"x\""), or the
// sentinel's text.
func fromSentinel(err error, sentinel string) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, sentinel); i >= 0 {
		return msg[i:]
	}
	return sentinel
}

// fromConnect maps a Connect error from warden-agent. Only codes the agent
// itself reports carry its message (it names sandbox paths and processes);
// transport failures, which can name host paths, get a generic message.
func fromConnect(ce *connect.Error, err error) *Error {
	msg := ce.Message()
	switch ce.Code() {
	case connect.CodeNotFound:
		return Wrap(CodeNotFound, msg, err)
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return Wrap(CodeBadRequest, msg, err)
	case connect.CodeUnauthenticated:
		// The agent says this about an unknown sandbox user, not about the
		// caller's API key.
		return Wrap(CodeBadRequest, msg, err)
	case connect.CodePermissionDenied:
		return Wrap(CodePermissionDenied, inSandbox(orDefault(msg, "permission denied")), err)
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeAborted:
		return Wrap(CodeConflict, msg, err)
	case connect.CodeResourceExhausted:
		return Wrap(CodeUnavailable, msg, err)
	case connect.CodeDeadlineExceeded:
		return Wrap(CodeTimeout, "sandbox agent did not answer in time", err)
	case connect.CodeCanceled:
		return Wrap(CodeUnavailable, "request canceled", err)
	case connect.CodeUnavailable:
		return Wrap(CodeUnavailable, "sandbox agent unavailable", err)
	}
	return Internal(err)
}

// fromAgentHTTP maps an error answer of the agent's /files and /tar routes.
func fromAgentHTTP(he *agentclient.HTTPError, err error) *Error {
	msg := agentMessage(he.Message)
	switch he.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotAcceptable,
		http.StatusUnsupportedMediaType, http.StatusRequestedRangeNotSatisfiable:
		// 401 from the agent means an unknown sandbox user.
		if msg == "" {
			msg = strings.ToLower(http.StatusText(he.Status))
		}
		return Wrap(CodeBadRequest, msg, err)
	case http.StatusForbidden:
		return Wrap(CodePermissionDenied, inSandbox(orDefault(msg, "permission denied")), err)
	case http.StatusNotFound:
		return Wrap(CodeNotFound, orDefault(msg, "not found"), err)
	case http.StatusConflict:
		return Wrap(CodeConflict, orDefault(msg, "conflict"), err)
	case http.StatusRequestEntityTooLarge:
		return Wrap(CodePayloadTooLarge, orDefault(msg, "request body too large"), err)
	case http.StatusInsufficientStorage:
		// No code of the API has status 507; the write did not fit in the
		// sandbox's disk, which is what payload_too_large says.
		return Wrap(CodePayloadTooLarge, orDefault(msg, "sandbox disk is full"), err)
	case http.StatusServiceUnavailable:
		return Wrap(CodeUnavailable, orDefault(msg, "sandbox agent unavailable"), err)
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return Wrap(CodeTimeout, "sandbox agent did not answer in time", err)
	}
	return Internal(err)
}

// agentMessage extracts the message of the agent's JSON error body
// {"code":N,"message":"..."}; a body that is not one gives "".
func agentMessage(body string) string {
	var b struct {
		Message string `json:"message"`
	}
	if json.Unmarshal([]byte(body), &b) == nil {
		return b.Message
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
	b, _ := json.Marshal(Body{Error: BodyError{Code: e.Code, Message: e.Message, RequestID: id}})
	w.Write(append(b, '\n'))
}

// inSandbox says that a permission error came from inside the sandbox.
func inSandbox(msg string) string { return "in the sandbox: " + msg }
