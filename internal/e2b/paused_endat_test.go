package e2b

import (
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// A paused sandbox's countdown is stopped: its endAt is when it was paused
// (as E2B reports a paused sandbox: its snapshot's time), not the stored
// expiry that a client would show counting down. A running one's is its
// expiry.
func TestPausedEndAtDoesNotCountDown(t *testing.T) {
	now := time.Now().UTC()
	running := store.Sandbox{ID: "sb-1", State: "running", StartedAt: now.Add(-time.Minute), ExpiresAt: now.Add(4 * time.Minute)}
	if got := toDetail(running).EndAt; !got.Equal(running.ExpiresAt) {
		t.Errorf("running: endAt = %v, want the expiry %v", got, running.ExpiresAt)
	}

	pausedAt := now.Add(-30 * time.Second)
	paused := running
	paused.State = "paused"
	paused.Lifecycle = store.Lifecycle{Timeout: 5 * time.Minute, ResumeTimeout: 5 * time.Minute, PausedAt: pausedAt}
	d := toDetail(paused)
	if !d.EndAt.Equal(pausedAt) {
		t.Errorf("paused: endAt = %v, want the pause time %v", d.EndAt, pausedAt)
	}
	if d.State != "paused" {
		t.Errorf("paused: state = %q", d.State)
	}

	// Paused before the pause time was recorded: a fixed time in the past,
	// never the expiry ahead.
	legacy := paused
	legacy.Lifecycle.PausedAt = time.Time{}
	legacy.Lifecycle.ResumeTimeout = 5 * time.Minute
	first := toDetail(legacy).EndAt
	if !first.Before(time.Now()) {
		t.Errorf("legacy paused: endAt = %v, in the future", first)
	}
	time.Sleep(10 * time.Millisecond)
	if again := toDetail(legacy).EndAt; !again.Equal(first) {
		t.Errorf("legacy paused: endAt moved from %v to %v", first, again)
	}
}
