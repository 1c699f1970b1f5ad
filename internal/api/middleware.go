package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// reqState is what the middleware and the route adapter learn about one
// request. It lives in the request's context; only the request's own
// goroutine touches it.
type reqState struct {
	id        string
	route     string         // ServeMux pattern; "" until routed
	ident     *auth.Identity // nil until authenticated
	principal string         // principal ID for logs and audit
	// ownOnly: the caller was admitted by the route's ownScope and may
	// touch only sandboxes its principal owns.
	ownOnly bool
	// kind is the route's governed action kind ("" for none); decided
	// says the action went through the engine (govern_door.go); sb is
	// the sandbox sandboxFor admitted, which the action names.
	kind    govern.Kind
	decided bool
	sb      *store.Sandbox
	// governed is the decided action the call's audit event records (the
	// last decision made for it; none without an engine).
	governed []govern.Decided

	// Audit event of the call, filled in by the adapter and the handler.
	action  string
	target  string
	detail  map[string]any
	audited bool // audit every outcome, not only denials
	done    bool // the event was appended (or must not be)
}

type stateKey struct{}

func stateOf(r *http.Request) *reqState {
	if st, ok := r.Context().Value(stateKey{}).(*reqState); ok {
		return st
	}
	return &reqState{detail: map[string]any{}}
}

// saneRequestID reports whether a client-sent X-Request-Id may be reused:
// 1 to 128 characters from a conservative set, so it is safe in logs and
// headers.
func saneRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '=':
		default:
			return false
		}
	}
	return true
}

func newRequestID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "req-" + hex.EncodeToString(b)
}

// requestID gives every request an ID: the client's X-Request-Id when sane,
// else a new one. It is set on the response before anything else is written.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		st := &reqState{id: id, detail: map[string]any{}}
		ctx := context.WithValue(r.Context(), stateKey{}, st)
		ctx = apierr.NewContext(ctx, id, s.log)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// statusWriter records the status and size of a response. It passes Flush
// and Hijack through (Unwrap, for http.ResponseController and websockets).
type statusWriter struct {
	http.ResponseWriter
	status  int
	written int64
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	n, err := sw.ResponseWriter.Write(b)
	sw.written += int64(n)
	return n, err
}

// Flush implements http.Flusher (some callers assert it directly).
func (sw *statusWriter) Flush() {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	http.NewResponseController(sw.ResponseWriter).Flush()
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

// started reports whether the response's header has been sent.
func (sw *statusWriter) started() bool { return sw.status != 0 }

// responseStarted reports whether w, as wrapped by accessLog, has sent its
// header.
func responseStarted(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case *statusWriter:
			return t.started()
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// accessLog writes one log line per request and records the request
// metrics by route pattern.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer s.logRequest(r, sw, start) // also for aborted (panicking) responses
		next.ServeHTTP(sw, r)
	})
}

func (s *Server) logRequest(r *http.Request, sw *statusWriter, start time.Time) {
	st := stateOf(r)
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	d := time.Since(start)
	route := st.route
	if route == "" {
		route = "unmatched"
	}
	s.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	s.metrics.latency.WithLabelValues(route).Observe(d.Seconds())
	s.log.Info("http request",
		"method", r.Method, "path", r.URL.Path, "route", route, "status", status,
		"duration", d, "bytes", sw.written, "principal", st.principal, "request_id", st.id)
}

// recoverPanics turns a handler panic into a logged 500. http.ErrAbortHandler
// is passed on: it is how a handler aborts a response on purpose.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panicked", "request_id", stateOf(r).id, "method", r.Method,
				"path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !responseStarted(w) {
				w.Header().Set("X-Request-Id", stateOf(r).id)
				apierr.Respond(w, r, apierr.Internal(fmt.Errorf("panic: %v", v)))
				return
			}
			panic(http.ErrAbortHandler) // headers are out: cut the response
		}()
		next.ServeHTTP(w, r)
	})
}
