package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// PIDer is implemented by backends whose sandboxes have a host process in
// the sandbox's network namespace (native: the agent, PID 1 inside), which
// the network manager attaches the sandbox's link to.
type PIDer interface {
	PID(ctx context.Context, h backend.Handle) (int, error)
}

// NetNSer is implemented by backends whose sandbox kernel reads its network
// devices when it boots (gvisor): a sandbox created with Spec.Network has a
// network namespace of its own, which the network manager sets up between
// Create and Start. NetNS returns it (an fd the caller owns), or an error
// for a sandbox created without one.
type NetNSer interface {
	NetNS(ctx context.Context, h backend.Handle) (*os.File, error)
}

// hasNetwork reports whether backend b can give a sandbox a network.
func hasNetwork(b backend.Backend) bool {
	_, pider := b.(PIDer)
	_, netnser := b.(NetNSer)
	return pider || netnser
}

// preNet asks, in spec, for a network namespace that the link is put in
// before the start, when backend b's kernel reads its devices at boot and
// policy p gives the sandbox a network.
func preNet(b backend.Backend, spec *backend.Spec, p network.Policy) {
	if _, ok := b.(NetNSer); ok && p.Mode != "" && p.Mode != network.ModeNone {
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
	m.setHandle(id, h) // a kill during the boot finds it
	fail := func(err error) (backend.Handle, error) {
		b.Delete(ctx, h)
		m.dropHandle(id)
		m.finish(ctx, id, StateFailed, why+err.Error())
		return h, err
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
	m.setHandle(id, h)
	if !spec.Network {
		if err := m.attachNetwork(ctx, id, h, p); err != nil {
			return fail(err)
		}
	}
	return h, nil
}

// ErrNoNetwork is returned for network calls on a daemon or backend
// without sandbox networking.
var ErrNoNetwork = errors.New("sandbox networking is not available")

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
	if m.Net == nil {
		if p.Mode != "" && p.Mode != network.ModeNone {
			return fmt.Errorf("%w: this daemon has no network manager", ErrNoNetwork)
		}
		return nil
	}
	if nn, ok := m.bk(h).(NetNSer); ok {
		ns, err := nn.NetNS(ctx, h)
		if err != nil {
			if p.Mode == "" || p.Mode == network.ModeNone {
				return nil // a sandbox created without a network stays without
			}
			return fmt.Errorf("%w: a %s sandbox gets a network only when created with one (%v)", ErrNoNetwork, h.Backend, err)
		}
		l, err := m.Net.AttachNetNS(ctx, id, ns, p)
		if err != nil {
			return fmt.Errorf("attach network: %w", err)
		}
		m.mu.Lock()
		if old, ok := m.links[id]; ok && old != l {
			old.Close()
		}
		m.links[id] = l
		m.mu.Unlock()
		return nil
	}
	pider, ok := m.bk(h).(PIDer)
	if !ok {
		if p.Mode != "" && p.Mode != network.ModeNone {
			return fmt.Errorf("%w on backend %s", ErrNoNetwork, h.Backend)
		}
		return nil
	}
	pid, err := pider.PID(ctx, h)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	l, err := m.Net.Attach(ctx, id, pid, p)
	if err != nil {
		return fmt.Errorf("attach network: %w", err)
	}
	m.mu.Lock()
	if old, ok := m.links[id]; ok {
		old.Close()
	}
	m.links[id] = l
	m.mu.Unlock()
	return nil
}

// closeNetwork ends a sandbox's link.
func (m *Manager) closeNetwork(id string) {
	m.mu.Lock()
	l, ok := m.links[id]
	delete(m.links, id)
	m.mu.Unlock()
	if ok {
		l.Close()
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
	m.mu.Lock()
	l, ok := m.links[sb.ID]
	m.mu.Unlock()
	if ok {
		s := l.Stats()
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
	m.mu.Lock()
	l, ok := m.links[id]
	h, hok := m.handles[id]
	m.mu.Unlock()
	switch {
	case ok:
		if err := l.SetPolicy(p); err != nil {
			return sb, fmt.Errorf("set network policy: %w", err)
		}
	case hok:
		if err := m.attachNetwork(ctx, id, h, p); err != nil {
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
