package sandbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// hasNetwork reports whether backend b can give a sandbox a network.
func hasNetwork(b backend.Backend) bool { return b.Capabilities().Networked() }

// preNet asks, in spec, for a network namespace that the link is put in
// before the start, when backend b's kernel reads its devices at boot and
// policy p gives the sandbox a network.
func preNet(b backend.Backend, spec *backend.Spec, p network.Policy) {
	if b.Capabilities().Network == backend.NetworkBeforeStart && p.Mode != "" && p.Mode != network.ModeNone {
		spec.Network, spec.ResolvConf = true, network.ResolvConf
	}
}

// boot creates a recorded sandbox on b, starts it with start (Start, or
// StartFrom for a fork) and gives it its network under p: before the start
// when the spec asks for it (preNet), after it otherwise. On failure
// nothing of the sandbox is left on the host and its record is failed, the
// reason prefixed with why.
func (m *Manager) boot(ctx context.Context, id string, b backend.Backend, spec backend.Spec, p network.Policy,
	start func(context.Context, backend.Handle) (backend.Handle, error), why string) (backend.Handle, error) {
	h, err := b.Create(ctx, spec)
	if err != nil {
		m.finish(ctx, id, StateFailed, why+err.Error())
		return h, err
	}
	fail := func(err error) (backend.Handle, error) {
		b.Delete(ctx, h)
		m.finish(ctx, id, StateFailed, why+err.Error())
		return h, err
	}
	if !m.setHandle(id, b, h) { // from now on a kill finds it
		return fail(killedBooting(id))
	}
	if spec.Network {
		if err := m.attachNetwork(ctx, id, h, p); err != nil {
			return fail(err)
		}
	}
	started, err := start(ctx, h)
	if err != nil {
		return fail(err)
	}
	h = started
	if !m.setHandle(id, b, h) {
		return fail(killedBooting(id))
	}
	if !spec.Network {
		if err := m.attachNetwork(ctx, id, h, p); err != nil {
			return fail(err)
		}
	}
	return h, nil
}

// killedBooting is boot's error for a sandbox killed while it booted.
func killedBooting(id string) error {
	return fmt.Errorf("killed while it started: %w", &StateError{ID: id, State: StateStopped, Want: string(StateStarting)})
}

// ErrNoNetwork is returned for network calls on a daemon or backend
// without sandbox networking.
var ErrNoNetwork = errkind.Sentinel(errkind.Invalid, "sandbox networking is not available", errkind.WithDetail)

// policyOf decodes a stored policy (empty: none).
func policyOf(sb store.Sandbox) network.Policy {
	var p network.Policy
	if len(sb.Network) > 0 {
		json.Unmarshal(sb.Network, &p)
	}
	if p.Mode == "" {
		p.Mode = network.ModeNone
	}
	return p
}

// attachNetwork gives a started sandbox its network link with policy p.
// Without a network manager, only mode none is possible.
func (m *Manager) attachNetwork(ctx context.Context, id string, h backend.Handle, p network.Policy) error {
	if m.cfg.Net == nil {
		if p.Mode != "" && p.Mode != network.ModeNone {
			return fmt.Errorf("%w: this daemon has no network manager", ErrNoNetwork)
		}
		return nil
	}
	b := m.bk(h)
	switch b.Capabilities().Network {
	case backend.NetworkBeforeStart:
		nn, ok := b.(backend.NetNSer)
		if !ok {
			return fmt.Errorf("%w: backend %s declares a network namespace it does not give", ErrNoNetwork, h.Backend)
		}
		ns, err := nn.NetNS(ctx, h)
		if err != nil {
			if p.Mode == "" || p.Mode == network.ModeNone {
				return nil // a sandbox created without a network stays without
			}
			return fmt.Errorf("%w: a %s sandbox gets a network only when created with one (%v)", ErrNoNetwork, h.Backend, err)
		}
		l, err := m.cfg.Net.AttachNetNS(ctx, id, ns, p)
		if err != nil {
			return fmt.Errorf("attach network: %w", err)
		}
		return m.setLink(id, l)
	case backend.NetworkAfterStart:
		pider, ok := b.(backend.PIDer)
		if !ok {
			return fmt.Errorf("%w: backend %s declares a network it does not give", ErrNoNetwork, h.Backend)
		}
		pid, err := pider.PID(ctx, h)
		if err != nil {
			return fmt.Errorf("network: %w", err)
		}
		l, err := m.cfg.Net.Attach(ctx, id, pid, p)
		if err != nil {
			return fmt.Errorf("attach network: %w", err)
		}
		return m.setLink(id, l)
	default:
		if p.Mode != "" && p.Mode != network.ModeNone {
			return fmt.Errorf("%w on backend %s", ErrNoNetwork, h.Backend)
		}
		return nil
	}
}

// NetworkStatus is a sandbox's policy and traffic.
type NetworkStatus struct {
	Policy network.Policy `json:"policy"`
	Stats  *network.Stats `json:"stats,omitempty"`
}

// Network returns a sandbox's network policy and, while it runs, its
// traffic counters.
func (m *Manager) Network(sb store.Sandbox) NetworkStatus {
	st := NetworkStatus{Policy: policyOf(sb)}
	if l, ok := m.lookup(sb.ID); ok && l.link != nil {
		s := l.link.Stats()
		st.Stats = &s
	}
	return st
}

// SetNetwork changes a running (or paused) sandbox's network policy; new
// connections follow it at once.
func (m *Manager) SetNetwork(ctx context.Context, id string, p network.Policy) (store.Sandbox, error) {
	p, err := p.Normalized()
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("%w: network: %w", ErrInvalid, err)
	}
	sb, err := m.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	if s := State(sb.State); s != StateRunning && s != StatePaused {
		return sb, &StateError{ID: id, State: s, Want: string(StateRunning)}
	}
	l, ok := m.lookup(id)
	switch {
	case ok && l.link != nil:
		if err := l.link.SetPolicy(p); err != nil {
			return sb, fmt.Errorf("set network policy: %w", err)
		}
	case ok && l.cold:
		// Cold-paused (coldpause.go): its link comes back with the stored
		// policy when it boots again.
	case ok:
		if err := m.attachNetwork(ctx, id, l.h, p); err != nil {
			return sb, err
		}
	default:
		return sb, fmt.Errorf("%w: sandbox %s has no live handle", ErrNoNetwork, id)
	}
	raw, _ := json.Marshal(p)
	return m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		s.Network = raw
		return nil
	})
}
