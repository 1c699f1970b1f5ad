package warden

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRetryKeepsFirstFailure: a retried upload whose retry fails for another
// reason (the sandbox the first attempt broke is now stopping) reports the
// first failure, not the retry's.
func TestRetryKeepsFirstFailure(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"code":"unavailable","message":"sandbox agent unavailable"}`))
			return
		}
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"code":"conflict","message":"sandbox sb-1 is stopping"}`))
	}))
	defer srv.Close()
	c, err := New(WithBaseURL(srv.URL), WithAPIKey("k"), WithRetry(RetryPolicy{MaxAttempts: 3}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.WriteFile(t.Context(), "sb-1", "/f", strings.NewReader("data"), WriteOptions{})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || n.Load() != 2 {
		t.Fatalf("after 503 then 409 (%d attempts): %v, want the 503", n.Load(), err)
	}
}
