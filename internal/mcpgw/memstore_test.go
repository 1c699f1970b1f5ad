package mcpgw

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// memStore is an in-memory store.MCPStore for the gateway's tests (the
// sqlite one has its own conformance tests).
type memStore struct {
	mu     sync.Mutex
	conns  map[string]store.MCPConnector
	srvs   map[string]store.MCPServer
	grants []store.MCPGrant
	pins   []store.MCPToolPin
	creds  map[string]store.MCPCredential
}

func newMemStore() *memStore {
	return &memStore{conns: map[string]store.MCPConnector{}, srvs: map[string]store.MCPServer{}, creds: map[string]store.MCPCredential{}}
}

func (m *memStore) CreateConnector(_ context.Context, c store.MCPConnector) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.conns[c.ID]; ok {
		return store.ErrConflict
	}
	m.conns[c.ID] = c
	return nil
}

func (m *memStore) GetConnector(_ context.Context, id string) (store.MCPConnector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conns[id]
	if !ok {
		return c, store.ErrNotFound
	}
	return c, nil
}

func (m *memStore) ListConnectors(context.Context) ([]store.MCPConnector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.MCPConnector
	for _, c := range m.conns {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.MCPConnector) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (m *memStore) UpdateConnector(_ context.Context, id string, fn func(*store.MCPConnector) error) (store.MCPConnector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conns[id]
	if !ok {
		return c, store.ErrNotFound
	}
	if err := fn(&c); err != nil {
		return c, err
	}
	m.conns[id] = c
	return c, nil
}

func (m *memStore) DeleteConnector(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.conns[id]; !ok {
		return store.ErrNotFound
	}
	delete(m.conns, id)
	return nil
}

func (m *memStore) CreateMCPServer(_ context.Context, s store.MCPServer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.srvs[s.ID]; ok {
		return store.ErrConflict
	}
	m.srvs[s.ID] = s
	return nil
}

func (m *memStore) GetMCPServer(_ context.Context, id string) (store.MCPServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.srvs[id]
	if !ok {
		return s, store.ErrNotFound
	}
	return s, nil
}

func (m *memStore) ListMCPServers(context.Context) ([]store.MCPServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.MCPServer
	for _, s := range m.srvs {
		out = append(out, s)
	}
	return out, nil
}

func (m *memStore) UpdateMCPServer(_ context.Context, id string, fn func(*store.MCPServer) error) (store.MCPServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.srvs[id]
	if !ok {
		return s, store.ErrNotFound
	}
	if err := fn(&s); err != nil {
		return s, err
	}
	m.srvs[id] = s
	return s, nil
}

func (m *memStore) DeleteMCPServer(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.srvs, id)
	return nil
}

func (m *memStore) PutMCPGrant(_ context.Context, g store.MCPGrant) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range m.grants {
		if x.ServerID == g.ServerID && x.PrincipalID == g.PrincipalID {
			return nil
		}
	}
	m.grants = append(m.grants, g)
	return nil
}

func (m *memStore) DeleteMCPGrant(_ context.Context, server, principal string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.grants)
	m.grants = slices.DeleteFunc(m.grants, func(x store.MCPGrant) bool { return x.ServerID == server && x.PrincipalID == principal })
	if len(m.grants) == n {
		return store.ErrNotFound
	}
	return nil
}

func (m *memStore) ListMCPGrants(_ context.Context, server, principal string) ([]store.MCPGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.MCPGrant
	for _, x := range m.grants {
		if (server == "" || x.ServerID == server) && (principal == "" || x.PrincipalID == principal) {
			out = append(out, x)
		}
	}
	return out, nil
}

func (m *memStore) PutToolPin(_ context.Context, p store.MCPToolPin) (store.MCPToolPin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range m.pins {
		if x.Connector == p.Connector && x.Tool == p.Tool && x.Hash == p.Hash {
			return x, nil
		}
	}
	m.pins = append(m.pins, p)
	return p, nil
}

func (m *memStore) ListToolPins(_ context.Context, f store.MCPToolPinFilter) ([]store.MCPToolPin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.MCPToolPin
	for _, x := range m.pins {
		if (f.Connector == "" || x.Connector == f.Connector) && (f.Tool == "" || x.Tool == f.Tool) &&
			(len(f.States) == 0 || slices.Contains(f.States, x.State)) {
			out = append(out, x)
		}
	}
	return out, nil
}

func (m *memStore) DecideToolPin(_ context.Context, connector, tool, hash, state, by string, at time.Time) (store.MCPToolPin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, x := range m.pins {
		if x.Connector == connector && x.Tool == tool && x.Hash == hash {
			m.pins[i].State, m.pins[i].DecidedBy, m.pins[i].DecidedAt = state, by, at
			return m.pins[i], nil
		}
	}
	return store.MCPToolPin{}, store.ErrNotFound
}

func (m *memStore) PutMCPCredential(_ context.Context, c store.MCPCredential) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.creds[c.Connector+"\x00"+c.PrincipalID] = c
	return nil
}

func (m *memStore) GetMCPCredential(_ context.Context, connector, principal string) (store.MCPCredential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.creds[connector+"\x00"+principal]
	if !ok {
		return c, store.ErrNotFound
	}
	return c, nil
}

func (m *memStore) DeleteMCPCredential(_ context.Context, connector, principal string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.creds[connector+"\x00"+principal]; !ok {
		return store.ErrNotFound
	}
	delete(m.creds, connector+"\x00"+principal)
	return nil
}

var _ store.MCPStore = (*memStore)(nil)
