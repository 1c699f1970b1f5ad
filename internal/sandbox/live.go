package sandbox

import (
	"fmt"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
)

// live is what the manager holds for one sandbox of this daemon, from the
// moment a create or fork reserves its place under Config.MaxSandboxes
// (or a restarted daemon re-attaches it) until it ends. Its fields are
// guarded by Manager.mu; the number of live sandboxes is what MaxSandboxes
// bounds.
type live struct {
	h      backend.Handle      // zero until the backend has created the sandbox
	b      backend.Backend     // the backend of h; nil until then
	client *agentclient.Client // its agent's client, made on first use
	link   *network.Link       // its network link; nil without a network
	// cold: a cold pause stops or has stopped its processes and keeps its
	// files (coldpause.go); the end of its processes is not its end.
	cold bool
	// stopping, while a cold pause stops the sandbox (its record already
	// says paused), is closed when the pause is done (coldpause.go).
	stopping chan struct{}
}

// booted reports whether the backend has created the sandbox.
func (l *live) booted() bool { return l.b != nil }

// reserve takes places for new sandboxes ids, all or none: an error wraps
// ErrCapacity when MaxSandboxes would be passed.
func (m *Manager) reserve(ids ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.sandboxes); m.cfg.MaxSandboxes > 0 && n+len(ids) > m.cfg.MaxSandboxes {
		return fmt.Errorf("%w: %d sandboxes already running", ErrCapacity, n)
	}
	for _, id := range ids {
		m.sandboxes[id] = &live{}
	}
	return nil
}

// adopt holds a sandbox re-attached after a daemon restart: it is counted
// even over MaxSandboxes (it runs already).
func (m *Manager) adopt(id string, b backend.Backend, h backend.Handle) {
	m.mu.Lock()
	m.sandboxes[id] = &live{h: h, b: b}
	m.mu.Unlock()
}

// rekey moves a reserved place from id from to id to (a create that claims
// a pooled sandbox takes the pooled one's id).
func (m *Manager) rekey(from, to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.sandboxes[from]; ok {
		delete(m.sandboxes, from)
		m.sandboxes[to] = l
	}
}

// setHandle records the backend handle of sandbox id. It reports false when
// the sandbox has no place any more (it was killed while it booted): the
// caller then deletes what it made.
func (m *Manager) setHandle(id string, b backend.Backend, h backend.Handle) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.sandboxes[id]
	if ok {
		l.h, l.b = h, b
	}
	return ok
}

// setClient gives sandbox id its agent client; without a place for it the
// client is closed and false returned.
func (m *Manager) setClient(id string, c *agentclient.Client) bool {
	m.mu.Lock()
	l, ok := m.sandboxes[id]
	var old *agentclient.Client
	if ok {
		old, l.client = l.client, c
	}
	m.mu.Unlock()
	if old != nil && old != c {
		old.Close()
	}
	if !ok {
		c.Close()
	}
	return ok
}

// setLink gives sandbox id its network link, closing the one it replaces;
// without a place for the sandbox the link is closed and an error returned.
func (m *Manager) setLink(id string, l *network.Link) error {
	m.mu.Lock()
	s, ok := m.sandboxes[id]
	var old *network.Link
	if ok {
		old, s.link = s.link, l
	}
	m.mu.Unlock()
	if old != nil && old != l {
		old.Close()
	}
	if !ok {
		l.Close()
		return fmt.Errorf("%w: sandbox %s ended while its network was attached", ErrNoNetwork, id)
	}
	return nil
}

// lookup returns a copy of what the manager holds for a booted sandbox id.
func (m *Manager) lookup(id string) (live, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.sandboxes[id]
	if !ok || !l.booted() {
		return live{}, false
	}
	return *l, true
}

// drop forgets sandbox id and closes its agent client and network link.
// It is idempotent.
func (m *Manager) drop(id string) {
	m.mu.Lock()
	l, ok := m.sandboxes[id]
	delete(m.sandboxes, id)
	m.mu.Unlock()
	if !ok {
		return
	}
	if l.link != nil {
		l.link.Close()
	}
	if l.client != nil {
		l.client.Close()
	}
}

// liveIDs lists the sandboxes the manager holds.
func (m *Manager) liveIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.sandboxes))
	for id := range m.sandboxes {
		ids = append(ids, id)
	}
	return ids
}

// reset takes back what setHandle, setClient and setLink gave sandbox id,
// closing its client and link, and keeps its place (a create whose pooled
// sandbox proved unusable boots one in it).
func (m *Manager) reset(id string) {
	m.mu.Lock()
	l, ok := m.sandboxes[id]
	var old live
	if ok {
		old, *l = *l, live{}
	}
	m.mu.Unlock()
	if old.link != nil {
		old.link.Close()
	}
	if old.client != nil {
		old.client.Close()
	}
}
