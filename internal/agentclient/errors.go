package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// The agent's errors carry their kind (internal/errkind): an HTTPError
// from its status, a Connect error from its code (every error of
// Client.Process and Client.FS is marked by kindInterceptor, its text and
// connect.CodeOf unchanged), and a transport failure is Unavailable
// (kindTransport). Only
// what the agent itself reports carries its message (it names sandbox paths
// and processes); transport failures, which can name host paths, do not.

// Kind returns the kind of the agent's answer (errkind.Kinded).
func (e *HTTPError) Kind() errkind.Kind {
	switch e.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotAcceptable,
		http.StatusUnsupportedMediaType, http.StatusRequestedRangeNotSatisfiable:
		// 401 from the agent means an unknown sandbox user, not the
		// caller's API key.
		return errkind.Malformed
	case http.StatusForbidden:
		return errkind.PermissionDenied
	case http.StatusNotFound:
		return errkind.NotFound
	case http.StatusConflict:
		return errkind.Conflict
	case http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage:
		// 507: the write did not fit in the sandbox's disk.
		return errkind.TooLarge
	case http.StatusServiceUnavailable:
		return errkind.Unavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return errkind.Timeout
	}
	return errkind.Internal
}

// Public returns the message of the agent's JSON error body, or words for
// its status; "" for an internal error, whose text is not shown.
func (e *HTTPError) Public() string {
	msg := agentMessage(e.Message)
	switch e.Kind() {
	case errkind.Malformed:
		return orDefault(msg, strings.ToLower(http.StatusText(e.Status)))
	case errkind.PermissionDenied:
		return inSandbox(orDefault(msg, "permission denied"))
	case errkind.NotFound:
		return orDefault(msg, "not found")
	case errkind.Conflict:
		return orDefault(msg, "conflict")
	case errkind.TooLarge:
		if e.Status == http.StatusInsufficientStorage {
			return orDefault(msg, "sandbox disk is full")
		}
		return orDefault(msg, "request body too large")
	case errkind.Unavailable:
		return orDefault(msg, "sandbox agent unavailable")
	case errkind.Timeout:
		return "sandbox agent did not answer in time"
	}
	return ""
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

// inSandbox says that a permission error came from inside the sandbox.
func inSandbox(msg string) string { return "in the sandbox: " + msg }

// kindTransport marks the failures to reach the agent (every request of
// Client.HTTP, and so of the Connect clients) Unavailable; context ends
// keep their own kinds (Timeout, Canceled).
type kindTransport struct{ *http.Transport }

func (t kindTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.Transport.RoundTrip(r)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return resp, err
	}
	return resp, errkind.Mark(err, errkind.Unavailable, "sandbox agent unavailable")
}

// connectKind marks a Connect error with the kind of its code.
func connectKind(err error) error {
	var ce *connect.Error
	if err == nil || errors.Is(err, io.EOF) || !errors.As(err, &ce) {
		return err
	}
	var ke errkind.Kinded
	if errors.As(err, &ke) {
		return err
	}
	msg := ce.Message()
	switch ce.Code() {
	case connect.CodeNotFound:
		return errkind.Mark(err, errkind.NotFound, msg)
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return errkind.Mark(err, errkind.Malformed, msg)
	case connect.CodeUnauthenticated:
		// The agent says this about an unknown sandbox user, not about the
		// caller's API key.
		return errkind.Mark(err, errkind.Malformed, msg)
	case connect.CodePermissionDenied:
		return errkind.Mark(err, errkind.PermissionDenied, inSandbox(orDefault(msg, "permission denied")))
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeAborted:
		return errkind.Mark(err, errkind.Conflict, msg)
	case connect.CodeResourceExhausted:
		return errkind.Mark(err, errkind.Exhausted, msg)
	case connect.CodeDeadlineExceeded:
		return errkind.Mark(err, errkind.Timeout, "sandbox agent did not answer in time")
	case connect.CodeCanceled:
		return errkind.Mark(err, errkind.Canceled, "request canceled")
	case connect.CodeUnavailable:
		return errkind.Mark(err, errkind.Unavailable, "sandbox agent unavailable")
	}
	return errkind.Mark(err, errkind.Internal, "")
}

// kindInterceptor marks every error of the agent's Connect clients with
// its kind (connectKind). io.EOF, which streams use to say "done", passes
// unchanged.
type kindInterceptor struct{}

func (kindInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, connectKind(err)
	}
}

func (kindInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return kindConn{next(ctx, spec)}
	}
}

func (kindInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// kindConn is a client stream whose errors are marked with their kinds.
type kindConn struct{ connect.StreamingClientConn }

func (c kindConn) Send(m any) error     { return connectKind(c.StreamingClientConn.Send(m)) }
func (c kindConn) Receive(m any) error  { return connectKind(c.StreamingClientConn.Receive(m)) }
func (c kindConn) CloseRequest() error  { return connectKind(c.StreamingClientConn.CloseRequest()) }
func (c kindConn) CloseResponse() error { return connectKind(c.StreamingClientConn.CloseResponse()) }
