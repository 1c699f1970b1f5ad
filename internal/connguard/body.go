package connguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// BodyLimits is the minimum-rate rule of request bodies.
type BodyLimits struct {
	// Timeout is the window: within each, at least MinRate×Timeout bytes
	// (at least one), or the rest of the body, must arrive.
	Timeout time.Duration
	// MinRate is the minimum average rate over a window, in bytes per
	// second.
	MinRate int64
	// StreamTimeout replaces Timeout for requests relaxed with Relax
	// (authenticated streaming uploads): then any progress, one byte per
	// StreamTimeout, is enough. Zero: Relax changes nothing.
	StreamTimeout time.Duration
}

// BodyTimeoutError is the error a body read gets when the client sent too
// little in a window.
type BodyTimeoutError struct {
	Min    int64
	Window time.Duration
	Err    error
}

func (e *BodyTimeoutError) Error() string {
	return fmt.Sprintf("request body too slow: fewer than %d bytes in %s", e.Min, e.Window)
}

func (e *BodyTimeoutError) Unwrap() error { return e.Err }

// Timeout reports true (net.Error style).
func (e *BodyTimeoutError) Timeout() bool { return true }

type bodyKey struct{}

// Handler enforces the rule on the bodies of requests to next. Requests
// without a body (GETs, WebSocket upgrades) are left alone, so no read
// deadline is left behind on connections handlers hijack.
//
// The rule is kept with the connection's read deadline: it is armed when
// the request starts and pushed forward each time a window's bytes have
// arrived, and cleared when the body has been read to its end. A handler
// that does not read the body leaves the deadline armed, which bounds the
// server's own draining of it after the response.
func (b BodyLimits) Handler(next http.Handler) http.Handler {
	if b.Timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		g := &guardedBody{rc: r.Body, ctl: http.NewResponseController(w), window: b.Timeout, min: minBytes(b.MinRate, b.Timeout),
			stream: b.StreamTimeout}
		g.arm(time.Now())
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, g))
		r.Body = g
		next.ServeHTTP(w, r)
	})
}

func minBytes(rate int64, window time.Duration) int64 {
	n := int64(float64(rate) * window.Seconds())
	return max(n, 1)
}

// Relax switches the body of r (when it goes through Handler) to the
// streaming allowance: one byte per StreamTimeout. Call it once the caller
// is authenticated, on routes that stream uploads.
func Relax(r *http.Request) {
	g, ok := r.Context().Value(bodyKey{}).(*guardedBody)
	if !ok || g.stream <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.window, g.min, g.got = g.stream, 1, 0
	g.arm(time.Now())
}

// guardedBody is a request body under the rule. Reads may come from
// another goroutine than Relax (a reverse proxy copies the body in its
// transport's goroutine).
type guardedBody struct {
	rc     io.ReadCloser
	ctl    *http.ResponseController
	stream time.Duration

	mu     sync.Mutex
	window time.Duration
	min    int64
	got    int64 // bytes in the current window
	done   bool  // read to the end, failed, or closed: the deadline is settled
}

// arm starts a window at now. g.mu is held (or g is not shared yet).
func (g *guardedBody) arm(now time.Time) {
	g.got = 0
	g.ctl.SetReadDeadline(now.Add(g.window))
}

func (g *guardedBody) Read(p []byte) (int, error) {
	n, err := g.rc.Read(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return n, err
	}
	g.got += int64(n)
	switch {
	case err == io.EOF:
		// The whole body is in: lift the deadline, which would otherwise
		// cut the server's background read (and the request's context)
		// while the handler streams its response.
		g.done = true
		g.ctl.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		g.done = true
		err = &BodyTimeoutError{Min: g.min, Window: g.window, Err: err}
	case err != nil:
		g.done = true
	case g.got >= g.min:
		g.arm(time.Now())
	}
	return n, err
}

func (g *guardedBody) Close() error { return g.rc.Close() }
