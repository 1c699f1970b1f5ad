package backend_test

import (
	"context"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor"
	"github.com/warden-sandbox/warden/internal/backend/native"
)

// restarting implements Restarter only.
type restarting struct{ bare }

func (*restarting) StopKeep(_ context.Context, h backend.Handle) (backend.Handle, error) {
	return h, nil
}
func (*restarting) Restart(_ context.Context, h backend.Handle) (backend.Handle, error) {
	return h, nil
}

// TestCheckCapabilitiesColdRestart checks that CheckCapabilities holds
// Capabilities.ColdRestart and Restarter together, and what the real
// backends declare: native and gvisor both restart cold.
func TestCheckCapabilitiesColdRestart(t *testing.T) {
	if err := backend.CheckCapabilities(&restarting{bare{caps: backend.Capabilities{ColdRestart: true}}}); err != nil {
		t.Errorf("restarter declaring it: %v", err)
	}
	for name, b := range map[string]backend.Backend{
		"bare claims cold restart": &bare{caps: backend.Capabilities{ColdRestart: true}},
		"restarter hides it":       &restarting{},
	} {
		if err := backend.CheckCapabilities(b); err == nil || !strings.Contains(err.Error(), "Restarter") {
			t.Errorf("%s: %v; want an error naming Restarter", name, err)
		}
	}
	if !(&native.Backend{}).Capabilities().ColdRestart {
		t.Error("native does not declare ColdRestart")
	}
	if !(&gvisor.Backend{}).Capabilities().ColdRestart {
		t.Error("gvisor does not declare ColdRestart")
	}
}
