package backend_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor"
	"github.com/warden-sandbox/warden/internal/backend/native"
)

// TestBackendCapabilities checks that each real backend declares in
// Capabilities exactly the optional interfaces it implements. Capabilities
// and the interface assertions need no running backend.
func TestBackendCapabilities(t *testing.T) {
	for _, b := range []backend.Backend{&native.Backend{}, &gvisor.Backend{}} {
		if err := backend.CheckCapabilities(b); err != nil {
			t.Errorf("%T: %v", b, err)
		}
		if !b.Capabilities().Networked() {
			t.Errorf("%T: declares no network; both real backends give sandboxes one", b)
		}
	}
	if got := (&native.Backend{}).Capabilities().Network; got != backend.NetworkAfterStart {
		t.Errorf("native network = %q, want after_start (the link goes into the agent's namespace)", got)
	}
	if got := (&gvisor.Backend{}).Capabilities().Network; got != backend.NetworkBeforeStart {
		t.Errorf("gvisor network = %q, want before_start (the sentry reads its devices at boot)", got)
	}
}

// bare implements only backend.Backend, declaring what caps says.
type bare struct{ caps backend.Capabilities }

func (b *bare) ID() string                         { return "bare" }
func (b *bare) Capabilities() backend.Capabilities { return b.caps }
func (b *bare) Create(context.Context, backend.Spec) (backend.Handle, error) {
	return backend.Handle{}, nil
}
func (b *bare) Start(_ context.Context, h backend.Handle) (backend.Handle, error) { return h, nil }
func (b *bare) Stop(context.Context, backend.Handle, time.Duration) error         { return nil }
func (b *bare) Kill(context.Context, backend.Handle) error                        { return nil }
func (b *bare) Wait(context.Context, backend.Handle) (backend.ExitStatus, error) {
	return backend.ExitStatus{}, nil
}
func (b *bare) Status(context.Context, backend.Handle) (backend.State, error) {
	return backend.StateRunning, nil
}
func (b *bare) Usage(context.Context, backend.Handle) (backend.Usage, error) {
	return backend.Usage{}, nil
}
func (b *bare) DialAgent(context.Context, backend.Handle) (net.Conn, error) { return nil, nil }
func (b *bare) Recover(context.Context, backend.Handle) error               { return nil }
func (b *bare) Delete(context.Context, backend.Handle) error                { return nil }

// abled adds every optional interface to bare, the network ones included.
type abled struct{ bare }

func (*abled) Pause(context.Context, backend.Handle) error  { return nil }
func (*abled) Resume(context.Context, backend.Handle) error { return nil }
func (*abled) Snapshot(context.Context, backend.Handle) (backend.SnapshotRef, error) {
	return backend.SnapshotRef{}, nil
}
func (*abled) StartFrom(_ context.Context, h backend.Handle, _ backend.SnapshotRef) (backend.Handle, error) {
	return h, nil
}
func (*abled) DeleteSnapshot(context.Context, backend.SnapshotRef) error { return nil }
func (*abled) Events(context.Context, backend.Handle) (<-chan backend.Event, error) {
	return nil, nil
}
func (*abled) PID(context.Context, backend.Handle) (int, error) { return 0, nil }

// netnsed implements NetNSer only.
type netnsed struct{ bare }

func (*netnsed) NetNS(context.Context, backend.Handle) (*os.File, error) { return nil, nil }

// TestCheckCapabilities checks that CheckCapabilities catches each kind of
// disagreement.
func TestCheckCapabilities(t *testing.T) {
	all := backend.Capabilities{Pause: true, Fork: true, Events: true, Network: backend.NetworkAfterStart}
	cases := []struct {
		name string
		b    backend.Backend
		want []string // substrings of the error; none: it agrees
	}{
		{"bare declares nothing", &bare{}, nil},
		{"bare declares none", &bare{caps: backend.Capabilities{Network: backend.NetworkNone}}, nil},
		{"abled declares all", &abled{bare{caps: all}}, nil},
		{"netns before start", &netnsed{bare{caps: backend.Capabilities{Network: backend.NetworkBeforeStart}}}, nil},
		{"bare claims pause", &bare{caps: backend.Capabilities{Pause: true}}, []string{"Pause", "Pauser"}},
		{"bare claims fork", &bare{caps: backend.Capabilities{Fork: true}}, []string{"Fork", "Snapshotter"}},
		{"bare claims events", &bare{caps: backend.Capabilities{Events: true}}, []string{"Events", "Eventer"}},
		{"bare claims network", &bare{caps: backend.Capabilities{Network: backend.NetworkAfterStart}}, []string{"PIDer"}},
		{"bare claims netns", &bare{caps: backend.Capabilities{Network: backend.NetworkBeforeStart}}, []string{"NetNSer"}},
		{"abled hides all", &abled{}, []string{"Pauser", "Snapshotter", "Eventer", "PIDer"}},
		{"pid backend says before start", &abled{bare{caps: backend.Capabilities{Pause: true, Fork: true, Events: true, Network: backend.NetworkBeforeStart}}}, []string{"NetNSer", "PIDer"}},
		{"netns backend says after start", &netnsed{bare{caps: backend.Capabilities{Network: backend.NetworkAfterStart}}}, []string{"PIDer", "NetNSer"}},
		{"unknown network", &bare{caps: backend.Capabilities{Network: "carrier-pigeon"}}, []string{"carrier-pigeon"}},
		{"memory snapshot without pause", &bare{caps: backend.Capabilities{MemorySnapshot: true}}, []string{"MemorySnapshot"}},
	}
	for _, c := range cases {
		err := backend.CheckCapabilities(c.b)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v; want agreement", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error; want one naming %v", c.name, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %s", c.name, err, w)
			}
		}
	}
}

func TestNetworked(t *testing.T) {
	for n, want := range map[backend.NetworkSupport]bool{"": false, backend.NetworkNone: false, backend.NetworkAfterStart: true, backend.NetworkBeforeStart: true} {
		if got := (backend.Capabilities{Network: n}).Networked(); got != want {
			t.Errorf("Networked() with network %q = %v, want %v", n, got, want)
		}
	}
}
