package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// MaxFork is the most sandboxes one fork call makes.
const MaxFork = 16

// ForkRequest asks for n copies of a running sandbox.
type ForkRequest struct {
	Owner    string
	N        int
	Timeout  time.Duration     // 0: the source's timeout
	Metadata map[string]string // added to the source's, after forked_from=<source id>
}

// fork makes n new sandboxes from a running sandbox's memory and files, on
// backends that can (gvisor): each runs what the source ran at the
// snapshot, with its own id, writable layers and random numbers. The
// source keeps running. All are made or none: on a failure the forks
// already made are killed.
func (m *Manager) fork(ctx context.Context, id string, req ForkRequest) ([]store.Sandbox, error) {
	if req.N < 1 || req.N > MaxFork {
		return nil, fmt.Errorf("%w: count must be between 1 and %d", ErrInvalid, MaxFork)
	}
	if req.Timeout != 0 && (req.Timeout < time.Second || req.Timeout > m.cfg.MaxTimeout) {
		return nil, fmt.Errorf("%w: timeout must be between 1s and %s", ErrInvalid, m.cfg.MaxTimeout)
	}
	src, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	h, err := m.handleOf(src, StateRunning)
	if err != nil {
		return nil, err
	}
	b := m.bk(h)
	sn, ok := b.(backend.Snapshotter)
	if !ok || !b.Capabilities().Fork {
		return nil, fmt.Errorf("%w: backend %s cannot fork sandboxes (gvisor can)", backend.ErrUnsupported, b.ID())
	}
	if len(src.Metadata)+len(req.Metadata) > 63 {
		return nil, fmt.Errorf("%w: at most 64 metadata keys", ErrInvalid)
	}
	release := func() {}
	if p, ok := m.tmpl.(interface{ Pin() func() }); ok {
		release = p.Pin()
	}
	defer release()
	tm, err := m.forkTemplate(src)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.cfg.MaxSandboxes > 0 && m.running+req.N > m.cfg.MaxSandboxes {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sandboxes already running", ErrCapacity, m.running)
	}
	m.running += req.N
	m.mu.Unlock()
	made := 0
	defer func() {
		m.mu.Lock()
		m.running -= req.N - made
		m.mu.Unlock()
	}()
	bctx := context.WithoutCancel(ctx)
	ref, err := sn.Snapshot(bctx, h)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	defer func() {
		if err := sn.DeleteSnapshot(bctx, ref); err != nil {
			m.log.Warn("delete fork snapshot", "sandbox", id, "err", err)
		}
	}()
	timeout := req.Timeout
	if timeout == 0 {
		timeout = cmp.Or(src.Lifecycle.Timeout, m.cfg.DefaultTimeout)
	}
	var out []store.Sandbox
	for i := 0; i < req.N; i++ {
		sb, err := m.restoreFork(bctx, sn, b, ref, src, tm, req, timeout)
		if err != nil {
			for _, f := range out {
				m.kill(bctx, f.ID, StateStopped, "fork of "+id+" failed", true)
			}
			return nil, fmt.Errorf("fork %s: %w", id, err)
		}
		made++
		out = append(out, sb)
	}
	return out, nil
}

// forkTemplate is the template src booted from (by id: its name may point
// elsewhere now).
func (m *Manager) forkTemplate(src store.Sandbox) (*template.Template, error) {
	tm, err := m.tmpl.Get(src.Template)
	if err == nil && tm.ID == src.TemplateID {
		return tm, nil
	}
	if src.TemplateID != "" {
		if byID, err2 := m.tmpl.Get(src.TemplateID); err2 == nil {
			return byID, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", src.Template, err)
	}
	return nil, fmt.Errorf("%w: template %s changed since sandbox %s started", backend.ErrUnsupported, src.Template, src.ID)
}

// restoreFork boots one fork and records it.
func (m *Manager) restoreFork(ctx context.Context, sn backend.Snapshotter, b backend.Backend, ref backend.SnapshotRef,
	src store.Sandbox, tm *template.Template, req ForkRequest, timeout time.Duration) (store.Sandbox, error) {
	id := NewID()
	spec := tm.Spec(id)
	spec.Env = maps.Clone(src.Env)
	spec.User, spec.Workdir = src.User, src.Workdir
	spec.Limits = backend.Limits{CPUMillis: src.CPUMillis, MemoryBytes: src.MemoryMB << 20, DiskBytes: src.DiskMB << 20}.WithDefaults()
	md := maps.Clone(src.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md["forked_from"] = src.ID
	maps.Copy(md, req.Metadata)
	now := time.Now().UTC()
	lc := src.Lifecycle
	lc.Timeout = timeout
	sb := store.Sandbox{
		ID: id, Template: src.Template, TemplateID: tm.ID, Lifecycle: lc, Network: src.Network, State: string(StateStarting),
		Owner: req.Owner, Backend: b.ID(), CPUMillis: src.CPUMillis, MemoryMB: src.MemoryMB, DiskMB: src.DiskMB,
		Env: src.Env, Metadata: md, User: src.User, Workdir: src.Workdir,
		CreatedAt: now, ExpiresAt: now.Add(timeout),
	}
	preNet(b, &spec, policyOf(src))
	if err := m.st.CreateSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("record sandbox: %w", err)
	}
	h, err := m.boot(ctx, id, b, spec, policyOf(src), func(ctx context.Context, h backend.Handle) (backend.Handle, error) {
		return sn.StartFrom(ctx, h, ref)
	}, "fork failed: ")
	if err != nil {
		return store.Sandbox{}, err
	}
	raw, _ := json.Marshal(h)
	sb, err = m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		s.State = string(StateRunning)
		s.StartedAt = time.Now().UTC()
		s.Handle = raw
		return nil
	})
	if err != nil {
		b.Delete(ctx, h)
		m.dropHandle(id)
		return store.Sandbox{}, fmt.Errorf("record start: %w", err)
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.DialAgent(ctx, h) })
	m.mu.Lock()
	m.clients[id] = c
	m.mu.Unlock()
	go m.watch(id, h)
	m.forwardEvents(id, h)
	if m.AfterStart != nil {
		m.AfterStart(ctx, sb)
	}
	return sb, nil
}
