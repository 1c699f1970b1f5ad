// Package sandbox is the daemon's sandbox manager: it turns API requests into
// backend calls, keeps the store's record of every sandbox in step with the
// backend, enforces the lifecycle state machine, kills sandboxes whose
// timeout passed, hands out agent clients, and re-attaches (or reports lost)
// every sandbox after a daemon restart.
//
// States:
//
//	starting ──> running <──> paused
//	   │            │
//	   │            └──> stopping ──> stopped
//	   └──> failed            (start failed; the end reason says why)
//	lost: after a daemon restart the sandbox could not be re-attached
//
// stopped, failed and lost are terminal: the record stays for history, the
// host resources are gone.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/warden-sandbox/warden/internal/network"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/crashpoint"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// State is a sandbox's lifecycle state.
type State string

// States of the lifecycle.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
	StateFailed   State = "failed"
	StateLost     State = "lost"
)

// Terminal reports whether s is an end state.
func (s State) Terminal() bool { return s == StateStopped || s == StateFailed || s == StateLost }

// Templates resolves template names.
type Templates interface {
	Get(name string) (*template.Template, error)
}

// Config configures the manager.
type Config struct {
	DefaultTimeout time.Duration // 5 min when zero
	MaxTimeout     time.Duration // 24 h when zero
	MaxSandboxes   int           // running at once; 0 = backend's limit
	Reap           time.Duration // how often expired sandboxes are looked for; 1 s when zero
	// PoolSize is how many sandboxes of the base template with default
	// limits are kept started and waiting; a create that asks for nothing
	// else claims one instead of booting (see StartPool). 0 disables the pool.
	PoolSize int
}

// CreateRequest asks for a new sandbox. Zero fields take defaults.
type CreateRequest struct {
	Owner     string
	Template  string
	CPUMillis int64
	MemoryMB  int64
	DiskMB    int64
	Env       map[string]string
	Metadata  map[string]string
	Timeout   time.Duration
	User      string
	Workdir   string
	// AutoPause pauses the sandbox at its timeout instead of killing it;
	// AutoResume resumes a paused sandbox when a call reaches it.
	AutoPause  bool
	AutoResume bool
	// Network is the sandbox's network policy; nil means none (loopback).
	Network *network.Policy
	// Isolation names the backend ("native", "gvisor"); empty means the
	// manager's default.
	Isolation string
	// EnvdKey is the API key the E2B envd access token is bound to (see
	// store.Sandbox.EnvdKey); "" binds none yet.
	EnvdKey string
}

// Manager runs sandboxes on its backends.
type Manager struct {
	cfg  Config
	st   store.Store
	b    backend.Backend // the default backend; the warm pool's
	tmpl Templates
	log  *slog.Logger

	backendsMu sync.RWMutex
	backends   map[string]backend.Backend // by ID, the default included
	// Probe, when set, is asked to make backend id available when a create
	// asks for one the manager lacks (gvisor once runsc is installed); it
	// reports whether it added it with AddBackend.
	Probe func(id string) bool

	pool     chan pooled // started, warmed, unclaimed sandboxes
	met      *metrics    // see metrics.go
	poolWake chan struct{}
	poolDone sync.WaitGroup

	mu      sync.Mutex
	handles map[string]backend.Handle
	clients map[string]*agentclient.Client
	links   map[string]*network.Link
	running int

	portOnce sync.Once
	ports    *http.Transport // see PortTransport

	// Net, if set, gives sandboxes their network (see network.go); without
	// it every sandbox has loopback only.
	Net *network.Manager

	// OnEnd, if set, is called once when a sandbox reaches a terminal state
	// (for audit and metrics). It must not block.
	OnEnd func(sb store.Sandbox)
	// OnEvent, if set, receives resource events (OOM kills) of running
	// sandboxes, for audit and metrics.
	OnEvent func(id string, ev backend.Event)
	// AfterStart, if set, runs once a created sandbox is running, before
	// Create returns (the daemon hands it its credential grants).
	AfterStart func(ctx context.Context, sb store.Sandbox)
}

// New builds a manager.
func New(cfg Config, st store.Store, b backend.Backend, tmpl Templates, log *slog.Logger) *Manager {
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = 5 * time.Minute
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 24 * time.Hour
	}
	if cfg.Reap == 0 {
		cfg.Reap = time.Second
	}
	return &Manager{cfg: cfg, st: st, b: b, tmpl: tmpl, log: log, backends: map[string]backend.Backend{b.ID(): b},
		pool: make(chan pooled, max(cfg.PoolSize, 0)), poolWake: make(chan struct{}, 1), met: newMetrics(),
		handles: map[string]backend.Handle{}, clients: map[string]*agentclient.Client{}, links: map[string]*network.Link{}}
}

// AddBackend makes another backend available to CreateRequest.Isolation,
// before or while the manager serves.
func (m *Manager) AddBackend(b backend.Backend) {
	m.backendsMu.Lock()
	m.backends[b.ID()] = b
	m.backendsMu.Unlock()
}

// backend returns the backend with id, if the manager has it.
func (m *Manager) backend(id string) (backend.Backend, bool) {
	m.backendsMu.RLock()
	defer m.backendsMu.RUnlock()
	b, ok := m.backends[id]
	return b, ok
}

// Backends lists the available backends' IDs, the default first.
func (m *Manager) Backends() []string {
	m.backendsMu.RLock()
	defer m.backendsMu.RUnlock()
	ids := []string{m.b.ID()}
	for id := range m.backends {
		if id != m.b.ID() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids[1:])
	return ids
}

// backendFor returns the backend that runs h.
func (m *Manager) backendFor(h backend.Handle) (backend.Backend, error) {
	if b, ok := m.backend(h.Backend); ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: backend %q is not available on this daemon", backend.ErrUnsupported, h.Backend)
}

// bk is backendFor for handles the manager made itself (their backend is
// known to be there).
func (m *Manager) bk(h backend.Handle) backend.Backend {
	if b, ok := m.backend(h.Backend); ok {
		return b
	}
	return m.b
}

// NewID returns a fresh sandbox id: "sb-" and 16 lowercase base32 characters.
func NewID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return "sb-" + string(b)
}

func (m *Manager) validate(req *CreateRequest) error {
	if req.Template == "" {
		req.Template = template.BaseName
	}
	if req.Timeout == 0 {
		req.Timeout = m.cfg.DefaultTimeout
	}
	switch {
	case req.Timeout < time.Second || req.Timeout > m.cfg.MaxTimeout:
		return fmt.Errorf("%w: timeout must be between 1s and %s", ErrInvalid, m.cfg.MaxTimeout)
	case req.CPUMillis != 0 && (req.CPUMillis < 100 || req.CPUMillis > 1024*1000):
		return fmt.Errorf("%w: cpu_millis must be between 100 and 1024000", ErrInvalid)
	case req.MemoryMB != 0 && (req.MemoryMB < 16 || req.MemoryMB > 1<<20):
		return fmt.Errorf("%w: memory_mb must be between 16 and 1048576", ErrInvalid)
	case req.DiskMB != 0 && (req.DiskMB < 16 || req.DiskMB > 1<<20):
		return fmt.Errorf("%w: disk_mb must be between 16 and 1048576", ErrInvalid)
	case len(req.Metadata) > 64:
		return fmt.Errorf("%w: at most 64 metadata keys", ErrInvalid)
	case len(req.Env) > 256:
		return fmt.Errorf("%w: at most 256 env variables", ErrInvalid)
	}
	for k, v := range req.Metadata {
		if k == "" || len(k) > 128 || len(v) > 1024 || strings.ContainsAny(k, ",:") {
			return fmt.Errorf("%w: metadata key %q: keys are 1-128 bytes without ',' or ':', values at most 1024 bytes", ErrInvalid, k)
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: env name %q is not valid", ErrInvalid, k)
		}
	}
	if req.User != "" && (len(req.User) > 32 || strings.ContainsAny(req.User, ":/\x00\n")) {
		return fmt.Errorf("%w: user %q is not valid", ErrInvalid, req.User)
	}
	if req.Workdir != "" && !strings.HasPrefix(req.Workdir, "/") {
		return fmt.Errorf("%w: workdir must be an absolute path", ErrInvalid)
	}
	if req.Network != nil {
		p, err := req.Network.Normalized()
		if err != nil {
			return fmt.Errorf("%w: network: %w", ErrInvalid, err)
		}
		if p.Mode != network.ModeNone && m.Net == nil {
			return fmt.Errorf("%w: network mode %s: this daemon has no sandbox networking", ErrInvalid, p.Mode)
		}
		req.Network = &p
	}
	if req.Isolation == "" {
		req.Isolation = m.b.ID()
	}
	b, ok := m.backend(req.Isolation)
	if !ok && m.Probe != nil && m.Probe(req.Isolation) {
		b, ok = m.backend(req.Isolation)
	}
	if !ok {
		return fmt.Errorf("%w: isolation %q is not available on this daemon (available: %s)", ErrInvalid, req.Isolation, strings.Join(m.Backends(), ", "))
	}
	if _, ok := b.(backend.Pauser); (req.AutoPause || req.AutoResume) && (!ok || !b.Capabilities().Pause) {
		return fmt.Errorf("%w: auto_pause and auto_resume need a backend that can pause; %s cannot", ErrInvalid, b.ID())
	}
	if req.Network != nil && req.Network.Mode != network.ModeNone {
		if !hasNetwork(b) {
			return fmt.Errorf("%w: network mode %s is not available on backend %s (only none)", ErrInvalid, req.Network.Mode, b.ID())
		}
	}
	return nil
}

// create is Create without its metrics.
func (m *Manager) create(ctx context.Context, req CreateRequest) (store.Sandbox, error) {
	if err := m.validate(&req); err != nil {
		return store.Sandbox{}, err
	}
	// Hold off template garbage collection until the sandbox's record
	// (with its template id) is stored: from then on GC sees it in use.
	release := func() {}
	if p, ok := m.tmpl.(interface{ Pin() func() }); ok {
		var once sync.Once
		unpin := p.Pin()
		release = func() { once.Do(unpin) }
	}
	defer release()
	tm, err := m.tmpl.Get(req.Template)
	if errors.Is(err, template.ErrUnknown) {
		return store.Sandbox{}, fmt.Errorf("%w: %q", ErrUnknownTemplate, req.Template)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("template %s: %w", req.Template, err)
	}
	m.mu.Lock()
	if m.cfg.MaxSandboxes > 0 && m.running >= m.cfg.MaxSandboxes {
		m.mu.Unlock()
		return store.Sandbox{}, fmt.Errorf("%w: %d sandboxes already running", ErrCapacity, m.running)
	}
	m.running++
	m.mu.Unlock()
	started := false
	defer func() {
		if !started {
			m.mu.Lock()
			m.running--
			m.mu.Unlock()
		}
	}()

	if p, ok := m.claim(req); ok {
		sb, err := m.startPooled(ctx, req, p)
		if err == nil {
			started = true
			m.met.hits.Inc()
			return sb, nil
		}
		m.log.Warn("pooled sandbox unusable; booting a new one", "err", err)
		m.met.misses.Inc()
	}
	bk, _ := m.backend(req.Isolation)
	id := NewID()
	spec := tm.Spec(id)
	for k, v := range req.Env {
		spec.Env[k] = v
	}
	if req.User != "" {
		spec.User = req.User
	}
	if req.Workdir != "" {
		spec.Workdir = req.Workdir
	}
	spec.Limits = backend.Limits{CPUMillis: req.CPUMillis, MemoryBytes: req.MemoryMB << 20, DiskBytes: req.DiskMB << 20}
	// The template's resource defaults fill what the request leaves out.
	if spec.Limits.CPUMillis == 0 {
		spec.Limits.CPUMillis = tm.Limits.CPUMillis
	}
	if spec.Limits.MemoryBytes == 0 {
		spec.Limits.MemoryBytes = tm.Limits.MemoryBytes
	}
	if spec.Limits.DiskBytes == 0 {
		spec.Limits.DiskBytes = tm.Limits.DiskBytes
	}
	spec.Limits = spec.Limits.WithDefaults()
	pol := policyOf(store.Sandbox{Network: networkOf(req)})
	preNet(bk, &spec, pol)
	now := time.Now().UTC()
	sb := store.Sandbox{
		ID: id, Template: req.Template, TemplateID: tm.ID, Lifecycle: lifecycleOf(req), Network: networkOf(req), State: string(StateStarting), Owner: req.Owner, Backend: bk.ID(),
		CPUMillis: spec.Limits.CPUMillis, MemoryMB: spec.Limits.MemoryBytes >> 20, DiskMB: spec.Limits.DiskBytes >> 20,
		Env: req.Env, Metadata: req.Metadata, User: spec.User, Workdir: spec.Workdir,
		CreatedAt: now, ExpiresAt: now.Add(req.Timeout), EnvdKey: req.EnvdKey,
	}
	if err := m.st.CreateSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("record sandbox: %w", err)
	}
	release()
	// Boot even if the caller goes away: the record must end in a real state.
	bctx := context.WithoutCancel(ctx)
	h, err := m.boot(bctx, id, bk, spec, pol, bk.Start, "start failed: ")
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("start sandbox: %w", err)
	}
	if tm.Start != nil {
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return bk.DialAgent(ctx, h) })
		m.mu.Lock()
		m.clients[id] = c
		m.mu.Unlock()
		if err := runStart(ctx, c, tm.Start); err != nil {
			bk.Delete(bctx, h)
			m.dropHandle(id)
			m.finish(bctx, id, StateFailed, err.Error())
			return store.Sandbox{}, err
		}
	}
	raw, _ := json.Marshal(h)
	sb, err = m.st.UpdateSandbox(bctx, id, func(s *store.Sandbox) error {
		s.State = string(StateRunning)
		s.StartedAt = time.Now().UTC()
		s.Handle = raw
		return nil
	})
	if err != nil {
		bk.Delete(bctx, h)
		m.dropHandle(id)
		return store.Sandbox{}, fmt.Errorf("record start: %w", err)
	}
	started = true
	go m.watch(id, h)
	m.forwardEvents(id, h)
	if m.AfterStart != nil {
		m.AfterStart(bctx, sb)
	}
	return sb, nil
}

func (m *Manager) setHandle(id string, h backend.Handle) {
	m.mu.Lock()
	m.handles[id] = h
	m.mu.Unlock()
}

func (m *Manager) dropHandle(id string) {
	m.closeNetwork(id)
	m.mu.Lock()
	delete(m.handles, id)
	if c, ok := m.clients[id]; ok {
		c.Close()
		delete(m.clients, id)
	}
	m.mu.Unlock()
}

// poolable reports whether req asks for nothing a pooled sandbox lacks.
func (m *Manager) poolable(req CreateRequest) bool {
	d := backend.DefaultLimits
	if _, netnser := m.b.(NetNSer); netnser && req.Network != nil && req.Network.Mode != network.ModeNone {
		return false // a pooled sandbox of such a backend has no network namespace
	}
	return req.Template == template.BaseName && req.User == "" && req.Workdir == "" && req.Isolation == m.b.ID() &&
		(req.CPUMillis == 0 || req.CPUMillis == d.CPUMillis) &&
		(req.MemoryMB == 0 || req.MemoryMB<<20 == d.MemoryBytes) &&
		(req.DiskMB == 0 || req.DiskMB<<20 == d.DiskBytes)
}

// pooled is a started sandbox waiting in the pool, with the agent client
// that warmed it (its HTTP/2 connection stays open for the first exec).
type pooled struct {
	h  backend.Handle
	c  *agentclient.Client
	id string // the sandbox id its claimer gets, already its hostname
}

// claim takes a started sandbox from the pool, if req can use one.
func (m *Manager) claim(req CreateRequest) (pooled, bool) {
	if m.cfg.PoolSize <= 0 || !m.poolable(req) {
		return pooled{}, false
	}
	select {
	case p := <-m.pool:
		select {
		case m.poolWake <- struct{}{}:
		default:
		}
		return p, true
	default:
		m.met.misses.Inc()
		return pooled{}, false
	}
}

// startPooled turns a claimed pooled sandbox into the caller's sandbox: a
// record with a fresh id, the caller's environment handed to the agent.
func (m *Manager) startPooled(ctx context.Context, req CreateRequest, p pooled) (store.Sandbox, error) {
	bctx := context.WithoutCancel(ctx)
	h, c := p.h, p.c
	if st, err := m.b.Status(bctx, h); err != nil || st != backend.StateRunning {
		c.Close()
		m.b.Delete(bctx, h)
		return store.Sandbox{}, fmt.Errorf("pooled sandbox %s is %s: %v", h.ID, st, err)
	}
	// The client that warmed the sandbox stays its agent client (Agent),
	// so the first exec reuses its open connection.
	if len(req.Env) > 0 {
		if err := c.Init(bctx, req.Env); err != nil {
			c.Close()
			m.b.Delete(bctx, h)
			return store.Sandbox{}, fmt.Errorf("hand environment to pooled sandbox: %w", err)
		}
	}
	d := backend.DefaultLimits
	now := time.Now().UTC()
	raw, _ := json.Marshal(h)
	tm, _ := m.tmpl.Get(template.BaseName)
	id := p.id
	sb := store.Sandbox{
		ID: id, Template: template.BaseName, TemplateID: tm.ID, Lifecycle: lifecycleOf(req), Network: networkOf(req), State: string(StateRunning), Owner: req.Owner, Backend: m.b.ID(),
		CPUMillis: d.CPUMillis, MemoryMB: d.MemoryBytes >> 20, DiskMB: d.DiskBytes >> 20,
		Env: req.Env, Metadata: req.Metadata, User: tm.User, Workdir: tm.Workdir,
		CreatedAt: now, StartedAt: now, ExpiresAt: now.Add(req.Timeout), Handle: raw, EnvdKey: req.EnvdKey,
	}
	// The network first: a failure here leaves no record, and the caller
	// boots a sandbox instead, as for any unusable pooled one.
	if err := m.attachNetwork(bctx, id, h, policyOf(sb)); err != nil {
		c.Close()
		m.b.Delete(bctx, h)
		return store.Sandbox{}, err
	}
	if err := m.st.CreateSandbox(bctx, sb); err != nil {
		m.closeNetwork(id)
		c.Close()
		m.b.Delete(bctx, h)
		return store.Sandbox{}, fmt.Errorf("record sandbox: %w", err)
	}
	m.mu.Lock()
	m.handles[id] = h
	m.clients[id] = c
	m.mu.Unlock()
	go m.watch(id, h)
	m.forwardEvents(id, h)
	if m.AfterStart != nil {
		m.AfterStart(bctx, sb)
	}
	return sb, nil
}

// StartPool keeps PoolSize sandboxes started and waiting until ctx ends,
// then deletes the unclaimed ones (Shutdown waits for that). Pooled
// sandboxes have no record: after a crash the daemon's next start purges
// them as orphans.
func (m *Manager) StartPool(ctx context.Context) {
	if m.cfg.PoolSize <= 0 {
		return
	}
	m.poolDone.Add(1)
	go func() {
		defer m.poolDone.Done()
		defer m.drainPool()
		m.fillPool(ctx)
	}()
}

func (m *Manager) fillPool(ctx context.Context) {
	backoff := time.Second
	for {
		for len(m.pool) < cap(m.pool) && ctx.Err() == nil {
			p, err := m.prestart(ctx)
			if err != nil {
				m.log.Warn("warm pool: start a sandbox", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Minute)
				continue
			}
			backoff = time.Second
			if ctx.Err() != nil {
				p.c.Close()
				m.b.Delete(context.Background(), p.h)
				return
			}
			m.pool <- p
		}
		select {
		case <-ctx.Done():
			return
		case <-m.poolWake:
		}
		// Refill once claims pause: booting competes for the CPUs with the
		// claimed sandbox's first commands (and with further claims in a
		// burst), which matter more. An empty pool refills at once.
		for len(m.pool) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.poolWake:
				continue
			case <-time.After(refillDelay):
			}
			break
		}
	}
}

// refillDelay is how long the warm pool waits after the last claim before
// it boots replacements.
const refillDelay = 30 * time.Millisecond

// prestart boots one sandbox of the base template with default limits and
// warms it: one process run through a client that stays connected, so the
// agent's spawn thread is set up (Landlock, capabilities) and the first
// exec of whoever claims it pays for neither that nor a connection.
func (m *Manager) prestart(ctx context.Context) (pooled, error) {
	tm, err := m.tmpl.Get(template.BaseName)
	if err != nil {
		return pooled{}, err
	}
	// The id its claimer will get is chosen now and is the sandbox's
	// hostname from the start (a hostname cannot change under running
	// processes); the host-side name stays pool-* until claimed, so
	// unclaimed ones are known as pooled after a crash.
	id := NewID()
	spec := tm.Spec("pool-" + strings.TrimPrefix(id, "sb-"))
	spec.Hostname = id
	spec.Limits = backend.DefaultLimits
	bctx := context.WithoutCancel(ctx)
	h, err := m.b.Create(bctx, spec)
	if err != nil {
		return pooled{}, err
	}
	started, err := m.b.Start(bctx, h)
	if err != nil {
		m.b.Delete(bctx, h)
		return pooled{}, err
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return m.b.DialAgent(ctx, started) })
	wctx, cancel := context.WithTimeout(bctx, 10*time.Second)
	defer cancel()
	if res, err := c.Run(wctx, agentclient.Cmd{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
		c.Close()
		m.b.Delete(bctx, started)
		return pooled{}, fmt.Errorf("warm pooled sandbox: exit %d: %v", res.ExitCode, err)
	}
	return pooled{h: started, c: c, id: id}, nil
}

// drainPool deletes every unclaimed pooled sandbox.
func (m *Manager) drainPool() {
	for {
		select {
		case p := <-m.pool:
			p.c.Close()
			m.b.Delete(context.Background(), p.h)
		default:
			return
		}
	}
}

// watch marks a sandbox stopped when its backend says it ended by itself.
func (m *Manager) watch(id string, h backend.Handle) {
	es, err := m.bk(h).Wait(context.Background(), h)
	if err != nil {
		return
	}
	reason := "sandbox exited"
	if es.Reason != "" {
		reason = es.Reason
	}
	if sb, err := m.st.GetSandbox(context.Background(), id); err == nil && !State(sb.State).Terminal() && State(sb.State) != StateStopping {
		m.log.Warn("sandbox ended by itself", "sandbox", id, "reason", reason)
	}
	m.kill(context.Background(), id, StateStopped, reason, false)
}

// Get returns a sandbox.
func (m *Manager) Get(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := m.st.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return sb, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return sb, err
}

// List lists sandboxes.
func (m *Manager) List(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, string, error) {
	return m.st.ListSandboxes(ctx, f)
}

// SetTimeout sets a running sandbox's expiry to now + d; a paused sandbox
// gets d when it is resumed (its countdown does not run while paused).
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration) (store.Sandbox, error) {
	if d < time.Second || d > m.cfg.MaxTimeout {
		return store.Sandbox{}, fmt.Errorf("%w: timeout must be between 1s and %s", ErrInvalid, m.cfg.MaxTimeout)
	}
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State).Terminal() {
			return &StateError{ID: id, State: State(s.State), Want: "running or paused"}
		}
		s.ExpiresAt = time.Now().UTC().Add(d)
		if State(s.State) == StatePaused {
			s.Lifecycle.ResumeTimeout = d
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return sb, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return sb, err
}

// killByID is Kill without its metrics.
func (m *Manager) killByID(ctx context.Context, id, reason string) error {
	if _, err := m.Get(ctx, id); err != nil {
		return err
	}
	return m.kill(ctx, id, StateStopped, reason, true)
}

func (m *Manager) kill(ctx context.Context, id string, final State, reason string, deleteBackend bool) error {
	ctx = context.WithoutCancel(ctx)
	prev := State("")
	_, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		prev = State(s.State)
		if prev.Terminal() || prev == StateStopping {
			return nil
		}
		s.State = string(StateStopping)
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark stopping: %w", err)
	}
	if prev.Terminal() || prev == StateStopping {
		return nil
	}
	m.mu.Lock()
	h, ok := m.handles[id]
	m.mu.Unlock()
	if ok {
		if err := m.bk(h).Delete(ctx, h); err != nil {
			m.log.Error("delete sandbox", "sandbox", id, "err", err)
		}
	}
	m.dropHandle(id)
	m.finish(ctx, id, final, reason)
	return nil
}

// finish moves a sandbox to a terminal state.
func (m *Manager) finish(ctx context.Context, id string, final State, reason string) {
	m.closeNetwork(id)
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State).Terminal() {
			return nil
		}
		if State(s.State) == StateRunning || State(s.State) == StateStopping || State(s.State) == StatePaused {
			m.mu.Lock()
			m.running--
			m.mu.Unlock()
		}
		s.State = string(final)
		s.EndedAt = time.Now().UTC()
		s.EndReason = reason
		return nil
	})
	if err != nil {
		m.log.Error("record sandbox end", "sandbox", id, "err", err)
		return
	}
	if m.OnEnd != nil {
		m.OnEnd(sb)
	}
}

// pause is Pause without its metrics.
func (m *Manager) pause(ctx context.Context, id string) (store.Sandbox, error) {
	h, err := m.handle(ctx, id, StateRunning)
	if err != nil {
		return store.Sandbox{}, err
	}
	b := m.bk(h)
	p, ok := b.(backend.Pauser)
	if !ok || !b.Capabilities().Pause {
		return store.Sandbox{}, fmt.Errorf("%w: backend %s cannot pause", backend.ErrUnsupported, b.ID())
	}
	if err := p.Pause(ctx, h); err != nil {
		return store.Sandbox{}, fmt.Errorf("pause: %w", err)
	}
	crashpoint.At(crashpoint.PauseBeforeStore) // Recover's reconcile fixes the record
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State) != StateRunning {
			return &StateError{ID: id, State: State(s.State), Want: string(StateRunning)}
		}
		s.State = string(StatePaused)
		// The countdown stops: a resume gives back what was left, or the
		// whole timeout when less was (a sandbox paused at its timeout
		// would otherwise be killed at once).
		s.Lifecycle.ResumeTimeout = max(time.Until(s.ExpiresAt), s.Lifecycle.Timeout, time.Second).Round(time.Second)
		return nil
	})
	if err != nil {
		p.Resume(context.WithoutCancel(ctx), h) // never leave it frozen behind a record that says otherwise
	}
	return sb, err
}

// resume is Resume without its metrics.
func (m *Manager) resume(ctx context.Context, id string) (store.Sandbox, error) {
	h, err := m.handle(ctx, id, StatePaused)
	if err != nil {
		return store.Sandbox{}, err
	}
	p, ok := m.bk(h).(backend.Pauser)
	if !ok {
		return store.Sandbox{}, fmt.Errorf("%w: backend %s cannot pause", backend.ErrUnsupported, h.Backend)
	}
	// A kernel restored from a checkpoint reads its devices again (gvisor):
	// give them back the addresses it took at boot.
	m.mu.Lock()
	l := m.links[id]
	m.mu.Unlock()
	if l != nil {
		if err := l.Readdress(); err != nil {
			return store.Sandbox{}, fmt.Errorf("resume: network: %w", err)
		}
	}
	if err := p.Resume(ctx, h); err != nil {
		return store.Sandbox{}, fmt.Errorf("resume: %w", err)
	}
	return m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State) == StatePaused {
			s.State = string(StateRunning)
			// A paused sandbox does not time out; resumed, it counts down
			// from where the pause froze it (Lifecycle.ResumeTimeout). A
			// sandbox paused before that was recorded gets its timeout
			// anew.
			if left := s.Lifecycle.ResumeTimeout; left > 0 {
				s.ExpiresAt = time.Now().UTC().Add(left)
			} else if t := s.Lifecycle.Timeout; t > 0 {
				if exp := time.Now().UTC().Add(t); s.ExpiresAt.Before(exp) {
					s.ExpiresAt = exp
				}
			}
			s.Lifecycle.ResumeTimeout = 0
		}
		return nil
	})
}

// networkOf is the stored network policy of a create request.
func networkOf(req CreateRequest) json.RawMessage {
	if req.Network == nil {
		return nil
	}
	raw, _ := json.Marshal(req.Network)
	return raw
}

// lifecycleOf is the stored lifecycle of a create request.
func lifecycleOf(req CreateRequest) store.Lifecycle {
	return store.Lifecycle{AutoPause: req.AutoPause, AutoResume: req.AutoResume, Timeout: req.Timeout}
}

// Wake resumes sb if it is paused and was created with AutoResume, and
// returns its record as it is now. Calls that reach a sandbox (exec, files,
// the E2B proxy) go through it.
func (m *Manager) Wake(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	if State(sb.State) != StatePaused || !sb.Lifecycle.AutoResume {
		return sb, nil
	}
	m.log.Info("resuming a paused sandbox for a call", "sandbox", sb.ID)
	woken, err := m.Resume(ctx, sb.ID)
	var se *StateError
	if errors.As(err, &se) { // resumed by a concurrent call
		return m.Get(ctx, sb.ID)
	}
	return woken, err
}

func (m *Manager) handle(ctx context.Context, id string, want State) (backend.Handle, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return backend.Handle{}, err
	}
	return m.handleOf(sb, want)
}

// handleOf returns the live handle of sb if it is in state want.
func (m *Manager) handleOf(sb store.Sandbox, want State) (backend.Handle, error) {
	id := sb.ID
	if State(sb.State) != want {
		return backend.Handle{}, &StateError{ID: id, State: State(sb.State), Want: string(want)}
	}
	m.mu.Lock()
	h, ok := m.handles[id]
	m.mu.Unlock()
	if !ok {
		return backend.Handle{}, &StateError{ID: id, State: State(sb.State), Want: string(want) + " on this daemon"}
	}
	return h, nil
}

// Usage reads a running sandbox's resource usage.
func (m *Manager) Usage(ctx context.Context, id string) (backend.Usage, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return backend.Usage{}, err
	}
	m.mu.Lock()
	h, ok := m.handles[id]
	m.mu.Unlock()
	if !ok {
		return backend.Usage{}, &StateError{ID: id, State: State(sb.State), Want: "running"}
	}
	return m.bk(h).Usage(ctx, h)
}

// Agent returns the client of a running sandbox's agent. Clients are shared
// and live as long as the sandbox.
func (m *Manager) Agent(ctx context.Context, id string) (*agentclient.Client, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return m.AgentFor(sb)
}

// AgentFor is Agent for a record the caller has just read (the API reads it
// for the ownership check), so the exec and file paths read the store once.
func (m *Manager) AgentFor(sb store.Sandbox) (*agentclient.Client, error) {
	id := sb.ID
	if State(sb.State) == StatePaused && sb.Lifecycle.AutoResume {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		woken, err := m.Wake(ctx, sb)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("auto-resume: %w", err)
		}
		sb = woken
	}
	h, err := m.handleOf(sb, StateRunning)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[id]; ok {
		return c, nil
	}
	b := m.bk(h)
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.DialAgent(ctx, h) })
	m.clients[id] = c
	return c, nil
}

// Recover re-attaches every sandbox the store says is live, after a daemon
// restart. Sandboxes that cannot be re-attached are cleaned up by the backend
// and recorded as lost with the reason.
func (m *Manager) Recover(ctx context.Context) (attached, lost int, err error) {
	for _, st := range []State{StateStarting, StateRunning, StatePaused, StateStopping} {
		token := ""
		for {
			page, next, err := m.st.ListSandboxes(ctx, store.SandboxFilter{States: []string{string(st)}, Limit: 500, PageToken: token})
			if err != nil {
				return attached, lost, fmt.Errorf("list sandboxes to recover: %w", err)
			}
			for _, sb := range page {
				if m.recoverOne(ctx, sb) {
					attached++
				} else {
					lost++
				}
			}
			if next == "" {
				break
			}
			token = next
		}
	}
	return attached, lost, nil
}

func (m *Manager) recoverOne(ctx context.Context, sb store.Sandbox) bool {
	var h backend.Handle
	if len(sb.Handle) == 0 || json.Unmarshal(sb.Handle, &h) != nil {
		m.finish(ctx, sb.ID, StateLost, "daemon restarted before the sandbox had started")
		return false
	}
	b, err := m.backendFor(h)
	if err != nil {
		m.finish(ctx, sb.ID, StateLost, "daemon restart: "+err.Error())
		return false
	}
	if err := b.Recover(ctx, h); err != nil {
		m.finish(ctx, sb.ID, StateLost, "daemon restart: "+err.Error())
		return false
	}
	m.setHandle(sb.ID, h)
	m.mu.Lock()
	m.running++
	m.mu.Unlock()
	if State(sb.State) == StateStopping {
		m.kill(ctx, sb.ID, StateStopped, "killed (completed after a daemon restart)", true)
		return true
	}
	m.reconcile(ctx, sb, b, h)
	// The network stack lived in the old daemon: give the sandbox a new
	// link with its stored policy.
	if err := m.attachNetwork(ctx, sb.ID, h, policyOf(sb)); err != nil {
		m.log.Error("re-attach network after restart", "sandbox", sb.ID, "err", err)
	}
	go m.watch(sb.ID, h)
	m.forwardEvents(sb.ID, h)
	return true
}

// reconcile makes a recovered sandbox's record say what its backend says:
// a crash between a backend's pause or resume and the store's write leaves
// a paused sandbox recorded running, or the reverse, and then exec, pause
// and resume all refuse it. A sandbox recorded starting is running.
func (m *Manager) reconcile(ctx context.Context, sb store.Sandbox, b backend.Backend, h backend.Handle) {
	var want State
	switch bs, err := b.Status(ctx, h); {
	case err == nil && bs == backend.StatePaused:
		want = StatePaused
	case err == nil && bs == backend.StateRunning, State(sb.State) == StateStarting:
		want = StateRunning
	default:
		return
	}
	if State(sb.State) == want {
		return
	}
	m.st.UpdateSandbox(ctx, sb.ID, func(s *store.Sandbox) error {
		cur := State(s.State)
		if cur != StateStarting && cur != StateRunning && cur != StatePaused {
			return nil
		}
		if cur == StatePaused && want == StateRunning {
			// As Resume: a fresh timeout.
			if t := s.Lifecycle.Timeout; t > 0 {
				if exp := time.Now().UTC().Add(t); s.ExpiresAt.Before(exp) {
					s.ExpiresAt = exp
				}
			}
		}
		if cur != want {
			m.log.Info("sandbox state corrected after restart", "sandbox", sb.ID, "recorded", cur, "backend", want)
		}
		s.State = string(want)
		return nil
	})
}

// forwardEvents passes the backend's resource events to OnEvent.
func (m *Manager) forwardEvents(id string, h backend.Handle) {
	ev, ok := m.bk(h).(backend.Eventer)
	if !ok {
		return
	}
	ch, err := ev.Events(context.Background(), h)
	if err != nil {
		m.log.Warn("sandbox events unavailable", "sandbox", id, "err", err)
		return
	}
	go func() {
		for e := range ch {
			m.log.Info("sandbox event", "sandbox", id, "kind", e.Kind, "detail", e.Detail)
			if e.Kind == "oom" {
				m.met.oom.WithLabelValues(h.Backend).Inc()
			}
			if m.OnEvent != nil {
				m.OnEvent(id, e)
			}
		}
	}()
}

// Run kills sandboxes whose timeout has passed until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Reap)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.reapExpired(ctx)
		}
	}
}

func (m *Manager) reapExpired(ctx context.Context) {
	m.mu.Lock()
	ids := make([]string, 0, len(m.handles))
	for id := range m.handles {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	now := time.Now()
	for _, id := range ids {
		sb, err := m.st.GetSandbox(ctx, id)
		// Paused sandboxes do not time out (they hold no CPU; Resume
		// grants a fresh timeout).
		if err != nil || State(sb.State) != StateRunning || sb.ExpiresAt.IsZero() || sb.ExpiresAt.After(now) {
			continue
		}
		if sb.Lifecycle.AutoPause {
			if _, err := m.Pause(ctx, id); err == nil {
				m.log.Info("sandbox paused at its timeout", "sandbox", id)
				continue
			} else {
				m.log.Warn("pause at timeout failed; killing", "sandbox", id, "err", err)
			}
		}
		m.log.Info("sandbox timed out", "sandbox", id)
		m.kill(ctx, id, StateStopped, "timeout", true)
	}
}

// Shutdown drops agent connections. Sandboxes keep running: a restarted
// daemon re-attaches them.
func (m *Manager) Shutdown() {
	m.poolDone.Wait() // the pool goroutine drains the pool when its context ends
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, c := range m.clients {
		c.Close()
		delete(m.clients, id)
	}
}

// TemplatesInUse returns the template ids of every sandbox that is not
// terminal: their layers may be mounted, so template garbage collection
// keeps them.
func (m *Manager) TemplatesInUse(ctx context.Context) (map[string]bool, error) {
	ids := map[string]bool{}
	f := store.SandboxFilter{States: []string{string(StateStarting), string(StateRunning), string(StatePaused), string(StateStopping)}, Limit: store.MaxPageSize}
	for {
		page, next, err := m.st.ListSandboxes(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, sb := range page {
			ids[sb.TemplateID] = true
		}
		if next == "" {
			return ids, nil
		}
		f.PageToken = next
	}
}
