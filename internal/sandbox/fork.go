package sandbox

import (
	"cmp"
	"context"
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
	// Name is the fork's name (see names.go); only a fork of one sandbox
	// may have one. A fork without one has none: names are not inherited.
	Name string
	// fromSnapshot: a start from a snapshot's memory image (memsnap.go),
	// recorded as metadata snapshot=<id> instead of forked_from.
	fromSnapshot string
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
	if req.Timeout != 0 {
		if err := m.CheckTimeout(req.Timeout); err != nil {
			return nil, err
		}
	}
	if err := checkMetadata(req.Metadata, 0); err != nil {
		return nil, err
	}
	if req.Name != "" && req.N != 1 {
		return nil, fmt.Errorf("%w: name: only a fork of one sandbox (count 1) can be given a name", ErrInvalid)
	}
	if err := m.checkName(ctx, req.Owner, req.Name); err != nil {
		return nil, err
	}
	src, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	l, err := m.liveOf(src, StateRunning)
	if err != nil {
		return nil, err
	}
	h, b := l.h, l.b
	sn, ok := b.(backend.Snapshotter)
	if !b.Capabilities().Fork || !ok {
		return nil, fmt.Errorf("%w: backend %s cannot fork sandboxes (gvisor can)", backend.ErrUnsupported, b.ID())
	}
	// Each fork also gets forked_from.
	if err := checkMetadata(req.Metadata, len(src.Metadata)+1); err != nil {
		return nil, err
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
	ids := make([]string, req.N)
	for i := range ids {
		ids[i] = NewID()
	}
	if err := m.reserve(ids...); err != nil {
		return nil, err
	}
	made := 0
	defer func() {
		for _, id := range ids[made:] {
			m.drop(id)
		}
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
		sb, err := m.restoreFork(bctx, ids[i], sn, b, ref, src, tm, req, timeout)
		if err != nil {
			for _, f := range out {
				m.kill(bctx, f.ID, "fork of "+id+" failed")
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

// restoreFork boots fork id, whose place is reserved, and records it.
func (m *Manager) restoreFork(ctx context.Context, id string, sn backend.Snapshotter, b backend.Backend, ref backend.SnapshotRef,
	src store.Sandbox, tm *template.Template, req ForkRequest, timeout time.Duration) (store.Sandbox, error) {
	spec := tm.Spec(id)
	spec.Env = maps.Clone(src.Env)
	spec.User, spec.Workdir = src.User, src.Workdir
	spec.Sudo = !src.Lifecycle.NoSudo
	spec.Limits = backend.Limits{CPUMillis: src.CPUMillis, MemoryBytes: src.MemoryMB << 20, DiskBytes: src.DiskMB << 20}.WithDefaults()
	md := maps.Clone(src.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	if req.fromSnapshot != "" {
		md["snapshot"] = req.fromSnapshot
	} else {
		md["forked_from"] = src.ID
	}
	maps.Copy(md, req.Metadata)
	now := time.Now().UTC()
	lc := src.Lifecycle
	lc.Timeout = timeout
	sb := store.Sandbox{
		ID: id, Template: src.Template, TemplateID: tm.ID, Lifecycle: lc, Network: src.Network,
		Owner: req.Owner, Backend: b.ID(), CPUMillis: src.CPUMillis, MemoryMB: src.MemoryMB, DiskMB: src.DiskMB,
		Env: src.Env, Metadata: md, User: src.User, Workdir: src.Workdir,
		CreatedAt: now, ExpiresAt: now.Add(timeout), Name: req.Name,
	}
	preNet(b, &spec, policyOf(src))
	if err := setState(&sb, StateStarting); err != nil {
		return store.Sandbox{}, err
	}
	if err := m.st.CreateSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("record sandbox: %w", asNameTaken(err, req.Name))
	}
	h, err := m.boot(ctx, id, b, spec, policyOf(src), func(ctx context.Context, h backend.Handle) (backend.Handle, error) {
		return sn.StartFrom(ctx, h, ref)
	}, "fork failed: ")
	if err != nil {
		return store.Sandbox{}, err
	}
	sb, err = m.recordStart(ctx, id, h)
	if err != nil {
		b.Delete(ctx, h)
		m.drop(id)
		return store.Sandbox{}, err
	}
	m.setClient(id, agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.DialAgent(ctx, h) }))
	go m.watch(id, h)
	m.forwardEvents(id, h)
	if m.cfg.AfterStart != nil {
		m.cfg.AfterStart(ctx, sb)
	}
	return sb, nil
}
