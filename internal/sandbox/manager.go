// Package sandbox is the daemon's sandbox manager: it turns API requests into
// backend calls, keeps the store's record of every sandbox in step with the
// backend, enforces the lifecycle state machine, kills sandboxes whose
// timeout passed, hands out agent clients, and re-attaches (or reports lost)
// every sandbox after a daemon restart.
//
// # States
//
// A sandbox's record moves along these edges only (the transitions table in
// state.go; TestStateDiagram keeps this list and the table equal):
//
//	new      ──> starting, running
//	starting ──> running, stopping, failed, lost
//	running  ──> paused, stopping, lost
//	paused   ──> running, stopping, lost
//	stopping ──> stopped, lost
//
// A record is created starting (booted) or running (claimed from the warm
// pool). A start that fails ends failed, the end reason saying why; a kill,
// a timeout or the sandbox's own exit goes through stopping to stopped,
// even while it boots; a sandbox that a restarted daemon cannot re-attach
// is lost. stopped, failed and lost are terminal: the record stays for
// history, the host resources are gone.
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
	"github.com/warden-sandbox/warden/internal/volume"
)

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
	// PausedRetention is how long a paused sandbox is kept before it is
	// deleted, unless its create asked for its own (lifetime.go); 0:
	// until killed.
	PausedRetention time.Duration
	// Probe, if set, is asked to make backend id available when a create
	// asks for one the manager lacks (one the daemon brings up later, such
	// as gvisor once runsc is installed); it reports whether it added it
	// with AddBackend.
	Probe func(id string) bool
	// Usage, if set, hears of sandboxes' counters before they go, and of
	// pauses and resumes (the usage meter; usage.go).
	Usage UsageHook
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
	// AutoPauseCold makes the pause at the timeout keep only the files
	// (PauseCold; E2B's autoPauseMemory false). It needs AutoPause, and a
	// sandbox paused so is never resumed by a call (Wake).
	AutoPauseCold bool
	// Network is the sandbox's network policy; nil means none (loopback).
	Network *network.Policy
	// Isolation names the backend ("native", "gvisor"); empty means the
	// manager's default.
	Isolation string
	// EnvdKey is the API key the E2B envd access token is bound to (see
	// store.Sandbox.EnvdKey); "" binds none yet.
	EnvdKey string
	// Name is the sandbox's optional name (see names.go): "" for none, else
	// unique among the owner's live sandboxes (a *NameTakenError if not).
	Name string
	// NoSudo turns off sudo inside the sandbox (on by default: see
	// internal/agent/sudo and docs/security.md).
	NoSudo bool
	// Volumes are the owner's persistent volumes to mount (volumes.go).
	Volumes []volume.Request
	// IdleTimeout, MaxLifetime, OnIdle ("pause", the default, or "kill")
	// and PausedRetention are the sandbox's lifetimes (lifetime.go); zero:
	// none. With an idle timeout and no Timeout there is no countdown.
	IdleTimeout     time.Duration
	MaxLifetime     time.Duration
	OnIdle          string
	PausedRetention time.Duration
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

	pool     chan pooled // started, warmed, unclaimed sandboxes
	met      *metrics    // see metrics.go
	poolWake chan struct{}
	poolDone sync.WaitGroup

	mu        sync.Mutex
	sandboxes map[string]*live // see live.go; len is how many run

	portOnce sync.Once
	ports    *http.Transport // see PortTransport

	vols VolumeAttacher // see volumes.go; nil: no volumes

	act   activity         // last activity of each sandbox (lifetime.go)
	clock func() time.Time // lifetimes' clock; nil: time.Now

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
		sandboxes: map[string]*live{}}
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

// create is Create without its metrics.
func (m *Manager) create(ctx context.Context, req CreateRequest) (store.Sandbox, error) {
	if err := m.validate(&req); err != nil {
		return store.Sandbox{}, err
	}
	if err := m.checkName(ctx, req.Owner, req.Name); err != nil {
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
	id := NewID()
	if err := m.reserve(id); err != nil {
		return store.Sandbox{}, err
	}
	started := false
	defer func() {
		if !started {
			m.drop(id)
		}
	}()

	if p, ok := m.claim(req); ok {
		m.rekey(id, p.id)
		sb, err := m.startPooled(ctx, req, p)
		if err == nil {
			started = true
			m.met.hits.Inc()
			return sb, nil
		}
		m.rekey(p.id, id)
		if errors.Is(err, ErrNameTaken) {
			return store.Sandbox{}, err // a create that raced for the name won
		}
		m.log.Warn("pooled sandbox unusable; booting a new one", "err", err)
		m.met.misses.Inc()
	}
	bk, _ := m.backend(req.Isolation)
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
	spec.Sudo = !req.NoSudo
	pol := policyOf(store.Sandbox{Network: networkOf(req)})
	preNet(bk, &spec, pol)
	now := time.Now().UTC()
	sb := store.Sandbox{
		ID: id, Template: req.Template, TemplateID: tm.ID, Lifecycle: lifecycleOf(req), Network: networkOf(req), Owner: req.Owner, Backend: bk.ID(),
		CPUMillis: spec.Limits.CPUMillis, MemoryMB: spec.Limits.MemoryBytes >> 20, DiskMB: spec.Limits.DiskBytes >> 20,
		Env: req.Env, Metadata: req.Metadata, User: spec.User, Workdir: spec.Workdir,
		CreatedAt: now, ExpiresAt: expiresAt(now, req.Timeout), EnvdKey: req.EnvdKey, Name: req.Name,
	}
	if err := setState(&sb, StateStarting); err != nil {
		return store.Sandbox{}, err
	}
	if err := m.st.CreateSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("record sandbox: %w", asNameTaken(err, req.Name))
	}
	release()
	if err := m.attachVolumes(ctx, id, req, &spec); err != nil {
		return store.Sandbox{}, err
	}
	// Boot even if the caller goes away: the record must end in a real state.
	bctx := context.WithoutCancel(ctx)
	h, err := m.boot(bctx, id, bk, spec, pol, bk.Start, "start failed: ")
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("start sandbox: %w", err)
	}
	if tm.Start != nil {
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return bk.DialAgent(ctx, h) })
		m.setClient(id, c) // a kill meanwhile closes it, and runStart fails
		if err := runStart(ctx, c, tm.Start); err != nil {
			bk.Delete(bctx, h)
			m.finish(bctx, id, StateFailed, err.Error())
			return store.Sandbox{}, err
		}
	}
	sb, err = m.recordStart(bctx, id, h)
	if err != nil {
		bk.Delete(bctx, h)
		m.drop(id)
		return store.Sandbox{}, err
	}
	started = true
	go m.watch(id, h)
	m.forwardEvents(id, h)
	if m.cfg.AfterStart != nil {
		m.cfg.AfterStart(bctx, sb)
	}
	return sb, nil
}

// recordStart records that sandbox id booted with handle h: it is
// running, unless it was killed while it booted (a *StateError then).
func (m *Manager) recordStart(ctx context.Context, id string, h backend.Handle) (store.Sandbox, error) {
	raw, _ := json.Marshal(h)
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if err := setState(s, StateRunning); err != nil {
			return err
		}
		s.StartedAt = time.Now().UTC()
		s.Handle = raw
		return nil
	})
	if err != nil {
		return sb, fmt.Errorf("record start: %w", err)
	}
	return sb, nil
}

// poolable reports whether req asks for nothing a pooled sandbox lacks.
func (m *Manager) poolable(req CreateRequest) bool {
	d := backend.DefaultLimits
	if m.b.Capabilities().Network == backend.NetworkBeforeStart && req.Network != nil && req.Network.Mode != network.ModeNone {
		return false // a pooled sandbox of such a backend has no network namespace
	}
	return len(req.Volumes) == 0 && req.Template == template.BaseName && req.User == "" && req.Workdir == "" && req.Isolation == m.b.ID() && !req.NoSudo &&
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
		ID: id, Template: template.BaseName, TemplateID: tm.ID, Lifecycle: lifecycleOf(req), Network: networkOf(req), Owner: req.Owner, Backend: m.b.ID(),
		CPUMillis: d.CPUMillis, MemoryMB: d.MemoryBytes >> 20, DiskMB: d.DiskBytes >> 20,
		Env: req.Env, Metadata: req.Metadata, User: tm.User, Workdir: tm.Workdir,
		CreatedAt: now, StartedAt: now, ExpiresAt: expiresAt(now, req.Timeout), Handle: raw, EnvdKey: req.EnvdKey, Name: req.Name,
	}
	m.setHandle(id, m.b, h) // in the place create reserved under p.id
	m.setClient(id, c)
	fail := func(err error) (store.Sandbox, error) {
		m.reset(id) // closes c and the link
		m.b.Delete(bctx, h)
		return store.Sandbox{}, err
	}
	if err := setState(&sb, StateRunning); err != nil {
		return fail(err)
	}
	// The network first: a failure here leaves no record, and the caller
	// boots a sandbox instead, as for any unusable pooled one.
	if err := m.attachNetwork(bctx, id, h, policyOf(sb)); err != nil {
		return fail(err)
	}
	if err := m.st.CreateSandbox(bctx, sb); err != nil {
		return fail(fmt.Errorf("record sandbox: %w", asNameTaken(err, req.Name)))
	}
	go m.watch(id, h)
	m.forwardEvents(id, h)
	if m.cfg.AfterStart != nil {
		m.cfg.AfterStart(bctx, sb)
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
	spec.Sudo = true // sudo is on by default; a create with NoSudo is not poolable
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
	if m.coldStopped(id) { // a cold pause ended its processes, not the sandbox
		return
	}
	reason := "sandbox exited"
	if es.Reason != "" {
		reason = es.Reason
	}
	if sb, err := m.st.GetSandbox(context.Background(), id); err == nil && !State(sb.State).Terminal() && State(sb.State) != StateStopping {
		m.log.Warn("sandbox ended by itself", "sandbox", id, "reason", reason)
	}
	m.kill(context.Background(), id, reason)
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
	if err := m.CheckTimeout(d); err != nil {
		return store.Sandbox{}, err
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
	return m.kill(ctx, id, reason)
}

// killUntraced marks a sandbox stopping, deletes it from its backend and records it
// stopped with reason. A sandbox already stopping is left to the call that
// made it so.
func (m *Manager) killUntraced(ctx context.Context, id string, reason string) error {
	ctx = context.WithoutCancel(ctx)
	prev := State("")
	_, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		prev = State(s.State)
		if prev.Terminal() || prev == StateStopping {
			return nil
		}
		return setState(s, StateStopping)
	})
	if err != nil {
		return fmt.Errorf("mark stopping: %w", err)
	}
	if prev.Terminal() || prev == StateStopping {
		return nil
	}
	m.stop(ctx, id, reason)
	return nil
}

// stop deletes a stopping sandbox from its backend and records it stopped.
func (m *Manager) stop(ctx context.Context, id string, reason string) {
	if l, ok := m.lookup(id); ok {
		m.observeUsage(ctx, id, true) // before the cgroup goes (usage.go)
		if err := l.b.Delete(ctx, l.h); err != nil {
			m.log.Error("delete sandbox", "sandbox", id, "err", err)
		}
	}
	m.finish(ctx, id, StateStopped, reason)
}

// finish forgets a sandbox whose host resources are gone (or were never
// made) and moves its record to the terminal state final. A record already
// terminal keeps its end; one the lifecycle does not let become final (a
// boot failing while a kill stops the sandbox) is left to the other call.
func (m *Manager) finish(ctx context.Context, id string, final State, reason string) {
	m.drop(id)
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State).Terminal() {
			return nil
		}
		if err := setState(s, final); err != nil {
			return err
		}
		s.EndedAt = time.Now().UTC()
		s.EndReason = reason
		return nil
	})
	var se *StateError
	if errors.As(err, &se) {
		m.log.Info("sandbox end not recorded: another call ends it", "sandbox", id, "end", final, "err", err)
		return
	}
	if err != nil {
		m.log.Error("record sandbox end", "sandbox", id, "err", err)
		return
	}
	m.detachVolumes(ctx, id)
	m.forgetActivity(id)
	if m.cfg.OnEnd != nil {
		m.cfg.OnEnd(sb)
	}
}

// pause is Pause without its metrics.
func (m *Manager) pause(ctx context.Context, id string) (store.Sandbox, error) {
	l, err := m.liveIn(ctx, id, StateRunning)
	if err != nil {
		return store.Sandbox{}, err
	}
	h, b := l.h, l.b
	p, ok := b.(backend.Pauser)
	if !b.Capabilities().Pause || !ok {
		return store.Sandbox{}, fmt.Errorf("%w: backend %s cannot pause", backend.ErrUnsupported, b.ID())
	}
	if err := p.Pause(ctx, h); err != nil {
		return store.Sandbox{}, fmt.Errorf("pause: %w", err)
	}
	crashpoint.At(crashpoint.PauseBeforeStore) // Recover's reconcile fixes the record
	sb, err := m.st.UpdateSandbox(ctx, id, markPaused)
	if err != nil {
		p.Resume(context.WithoutCancel(ctx), h) // never leave it frozen behind a record that says otherwise
	}
	return sb, err
}

// markPaused records a running sandbox paused.
func markPaused(s *store.Sandbox) error {
	if State(s.State) != StateRunning {
		return &StateError{ID: s.ID, State: State(s.State), Want: string(StateRunning)}
	}
	if err := setState(s, StatePaused); err != nil {
		return err
	}
	// The countdown stops: a resume gives back what was left, or the
	// whole timeout when less was (a sandbox paused at its timeout
	// would otherwise be killed at once).
	s.Lifecycle.ResumeTimeout = max(time.Until(s.ExpiresAt), s.Lifecycle.Timeout, time.Second).Round(time.Second)
	if s.ExpiresAt.IsZero() { // no countdown (an idle timeout alone): none when resumed either
		s.Lifecycle.ResumeTimeout = 0
	}
	s.Lifecycle.PausedAt = time.Now().UTC()
	return nil
}

// resume is Resume without its metrics.
func (m *Manager) resume(ctx context.Context, id string) (store.Sandbox, error) {
	if sb, err := m.Get(ctx, id); err == nil && State(sb.State) == StatePaused && sb.Lifecycle.Cold {
		return m.resumeCold(ctx, sb) // coldpause.go
	}
	l, err := m.liveIn(ctx, id, StatePaused)
	if err != nil {
		return store.Sandbox{}, err
	}
	h := l.h
	p, ok := l.b.(backend.Pauser)
	if !l.b.Capabilities().Pause || !ok {
		return store.Sandbox{}, fmt.Errorf("%w: backend %s cannot pause", backend.ErrUnsupported, h.Backend)
	}
	// A kernel restored from a checkpoint reads its devices again (gvisor):
	// give them back the addresses it took at boot.
	if l.link != nil {
		if err := l.link.Readdress(); err != nil {
			return store.Sandbox{}, fmt.Errorf("resume: network: %w", err)
		}
	}
	if err := p.Resume(ctx, h); err != nil {
		return store.Sandbox{}, fmt.Errorf("resume: %w", err)
	}
	return m.st.UpdateSandbox(ctx, id, markResumed)
}

// markResumed records a paused sandbox running again (a record in another
// state is left as it is).
func markResumed(s *store.Sandbox) error {
	if State(s.State) == StatePaused {
		if err := setState(s, StateRunning); err != nil {
			return err
		}
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
		s.Lifecycle.PausedAt = time.Time{}
		s.Lifecycle.Cold = false
	}
	return nil
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
	lc := store.Lifecycle{AutoPause: req.AutoPause, AutoResume: req.AutoResume, Timeout: req.Timeout, NoSudo: req.NoSudo, AutoPauseCold: req.AutoPauseCold}
	lifecycleOfLifetimes(&lc, req)
	return lc
}

// expiresAt is the end of a countdown of d from now; none (zero) when d is.
func expiresAt(now time.Time, d time.Duration) time.Time {
	if d == 0 {
		return time.Time{}
	}
	return now.Add(d)
}

// Wake resumes sb if it is paused and was created with AutoResume, and
// returns its record as it is now. Calls that reach a sandbox (exec, files,
// the E2B proxy) go through it.
func (m *Manager) Wake(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	if State(sb.State) != StatePaused || !sb.Lifecycle.AutoResume || sb.Lifecycle.Cold {
		// A sandbox paused without its memory boots again only when asked
		// (Resume), as E2B's auto-resume refuses one.
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

// liveIn returns what the manager holds for sandbox id if its record is in
// state want.
func (m *Manager) liveIn(ctx context.Context, id string, want State) (live, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return live{}, err
	}
	return m.liveOf(sb, want)
}

// liveOf returns what the manager holds for sb if it is in state want.
func (m *Manager) liveOf(sb store.Sandbox, want State) (live, error) {
	id := sb.ID
	if State(sb.State) != want {
		return live{}, &StateError{ID: id, State: State(sb.State), Want: string(want)}
	}
	l, ok := m.lookup(id)
	if !ok {
		return live{}, &StateError{ID: id, State: State(sb.State), Want: string(want) + " on this daemon"}
	}
	return l, nil
}

// Usage reads a running sandbox's resource usage.
func (m *Manager) Usage(ctx context.Context, id string) (backend.Usage, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return backend.Usage{}, err
	}
	l, ok := m.lookup(id)
	if !ok {
		return backend.Usage{}, &StateError{ID: id, State: State(sb.State), Want: "running"}
	}
	return l.b.Usage(ctx, l.h)
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
	m.Touch(id) // activity, for idle timeouts (lifetime.go)
	if State(sb.State) == StatePaused && sb.Lifecycle.AutoResume {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		woken, err := m.Wake(ctx, sb)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("auto-resume: %w", err)
		}
		sb = woken
	}
	if _, err := m.liveOf(sb, StateRunning); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.sandboxes[id]
	if !ok || !l.booted() {
		return nil, &StateError{ID: id, State: State(sb.State), Want: string(StateRunning) + " on this daemon"}
	}
	if l.client == nil {
		b, h := l.b, l.h
		l.client = agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.DialAgent(ctx, h) })
	}
	return l.client, nil
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
	m.adopt(sb.ID, b, h)
	if State(sb.State) == StateStopping {
		// The old daemon was killing it: finish that.
		m.stop(ctx, sb.ID, "killed (completed after a daemon restart)")
		return true
	}
	if State(sb.State) == StatePaused && sb.Lifecycle.Cold {
		m.recoverCold(ctx, sb, b, h) // coldpause.go: nothing of it runs
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
	_, err := m.st.UpdateSandbox(ctx, sb.ID, func(s *store.Sandbox) error {
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
		if cur == want {
			return nil
		}
		m.log.Info("sandbox state corrected after restart", "sandbox", sb.ID, "recorded", cur, "backend", want)
		return setState(s, want)
	})
	if err != nil {
		m.log.Warn("correct sandbox state after restart", "sandbox", sb.ID, "err", err)
	}
}

// forwardEvents passes the backend's resource events to OnEvent.
func (m *Manager) forwardEvents(id string, h backend.Handle) {
	b := m.bk(h)
	ev, ok := b.(backend.Eventer)
	if !b.Capabilities().Events || !ok {
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
			if m.cfg.OnEvent != nil {
				m.cfg.OnEvent(id, e)
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
			m.reapLifetimes(ctx)
		}
	}
}

func (m *Manager) reapExpired(ctx context.Context) {
	now := time.Now()
	for _, id := range m.liveIDs() {
		sb, err := m.st.GetSandbox(ctx, id)
		// Paused sandboxes do not time out (they hold no CPU; Resume
		// grants a fresh timeout).
		if err != nil || State(sb.State) != StateRunning || sb.ExpiresAt.IsZero() || sb.ExpiresAt.After(now) {
			continue
		}
		if sb.Lifecycle.AutoPause {
			m.lifecycleEvent(id, "timeout_pause", "timeout reached")
			pause := m.Pause
			if sb.Lifecycle.AutoPauseCold {
				pause = m.PauseCold
			}
			_, err := pause(auto(ctx, "timeout_pause"), id) // trace.go
			if errors.Is(err, backend.ErrUnsupported) && sb.Lifecycle.AutoPauseCold {
				// The backend keeps this sandbox's files in memory:
				// paused with its memory rather than killed.
				m.log.Warn("pause without memory at timeout refused; pausing with memory", "sandbox", id, "err", err)
				_, err = m.Pause(auto(ctx, "timeout_pause"), id)
			}
			if err == nil {
				m.log.Info("sandbox paused at its timeout", "sandbox", id)
				continue
			} else {
				m.log.Warn("pause at timeout failed; killing", "sandbox", id, "err", err)
			}
		}
		m.log.Info("sandbox timed out", "sandbox", id)
		m.lifecycleEvent(id, "timeout_kill", "timeout reached")
		m.kill(auto(ctx, "timeout_kill"), id, "timeout")
	}
}

// Shutdown drops agent connections. Sandboxes keep running: a restarted
// daemon re-attaches them.
func (m *Manager) Shutdown() {
	m.poolDone.Wait() // the pool goroutine drains the pool when its context ends
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.sandboxes {
		if l.client != nil {
			l.client.Close()
			l.client = nil
		}
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
