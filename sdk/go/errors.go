package warden

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Stable error codes of the Warden API (the ErrorCode schema).
const (
	CodeBadRequest       = "bad_request"       // 400
	CodeInvalidJSON      = "invalid_json"      // 400
	CodeValidationFailed = "validation_failed" // 422
	CodeUnauthenticated  = "unauthenticated"   // 401
	CodeForbidden        = "forbidden"         // 403
	CodePermissionDenied = "permission_denied" // 403: the sandbox's own file or program permissions
	CodeNotFound         = "not_found"         // 404
	CodeConflict         = "conflict"          // 409
	CodePayloadTooLarge  = "payload_too_large" // 413
	CodeRateLimited      = "rate_limited"      // 429
	CodeUnavailable      = "unavailable"       // 503
	CodeInternal         = "internal"          // 500
	CodeTimeout          = "timeout"           // 504
	CodeBadGateway       = "bad_gateway"       // 502
)

// Error is an error reported by the daemon: an HTTP error response, or an error event
// inside a stream.
type Error struct {
	// Status is the HTTP status; 0 for an error event that arrived inside a stream.
	Status int
	// Code is the stable error code (see the Code constants); empty when the response
	// had no Warden error body, for example from a proxy in between.
	Code string
	// Message is the human-readable explanation.
	Message string
	// RequestID identifies the request in the daemon's logs.
	RequestID string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Code != "" {
		b.WriteString(e.Code)
	} else {
		fmt.Fprintf(&b, "http %d", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	switch {
	case e.Status != 0 && e.Code != "" && e.RequestID != "":
		fmt.Fprintf(&b, " (http %d, request %s)", e.Status, e.RequestID)
	case e.Status != 0 && e.Code != "":
		fmt.Fprintf(&b, " (http %d)", e.Status)
	case e.RequestID != "":
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

// is reports whether err wraps an *Error with the given status or code.
func is(err error, status int, code string) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == code || (e.Code == "" && e.Status == status)
}

// IsNotFound reports whether err is a Warden not_found error (HTTP 404).
func IsNotFound(err error) bool { return is(err, http.StatusNotFound, CodeNotFound) }

// IsConflict reports whether err is a Warden conflict error (HTTP 409): the object is in the
// wrong state, for example the sandbox has stopped.
func IsConflict(err error) bool { return is(err, http.StatusConflict, CodeConflict) }

// IsForbidden reports whether err is a Warden forbidden error (HTTP 403).
func IsForbidden(err error) bool { return is(err, http.StatusForbidden, CodeForbidden) }

// IsPermissionDenied reports whether err is a Warden permission_denied error (HTTP 403):
// the sandbox's user may not read, write or run the file (its permissions inside the
// sandbox refused it), as opposed to [IsForbidden], which is about the API key.
func IsPermissionDenied(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodePermissionDenied
}

// IsUnauthenticated reports whether err is a Warden unauthenticated error (HTTP 401).
func IsUnauthenticated(err error) bool {
	return is(err, http.StatusUnauthorized, CodeUnauthenticated)
}

// IsValidationFailed reports whether err is a Warden validation_failed error (HTTP 422):
// the request was well formed but asked for something invalid here (for example an
// isolation backend the daemon does not have).
func IsValidationFailed(err error) bool {
	return is(err, http.StatusUnprocessableEntity, CodeValidationFailed)
}

// IsRateLimited reports whether err is a Warden rate_limited error (HTTP 429).
func IsRateLimited(err error) bool { return is(err, http.StatusTooManyRequests, CodeRateLimited) }

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error *struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// decodeError reads and closes resp's body and returns the *Error it describes.
func decodeError(resp *http.Response) *Error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return errorFrom(resp.StatusCode, resp.Header, b)
}

func errorFrom(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, RequestID: h.Get("X-Request-Id")}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
		if eb.Error.RequestID != "" {
			e.RequestID = eb.Error.RequestID
		}
		return e
	}
	// Not a Warden error body (a proxy, or a daemon that crashed mid-write).
	msg := strings.TrimSpace(string(body))
	if !utf8.ValidString(msg) || len(msg) > 512 {
		msg = ""
	}
	if msg == "" {
		msg = strings.ToLower(http.StatusText(status))
	}
	e.Message = msg
	return e
}
