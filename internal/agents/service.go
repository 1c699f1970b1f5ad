package agents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/agents/slack"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// Run triggers.
const (
	TriggerManual  = "manual"
	TriggerCron    = "cron"
	TriggerWebhook = "webhook"
	TriggerSlack   = "slack"
)

// Metadata keys of runs' sandboxes.
const (
	MetaAgent = "warden.agent"
	MetaRun   = "warden.agent.run"
)

// Paths and variables a run sees.
const (
	InputPath = "/tmp/warden-run/input.json"
	// Reason of runs a daemon crash or restart interrupted.
	ReasonRestarted = "daemon restarted"
)

// DefaultMaxRuns is the default global cap of runs at once.
const DefaultMaxRuns = 8

// InvalidError is a definition or request the service refuses (a 400).
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// ErrNotCancellable means the run already ended.
var ErrNotCancellable = errors.New("the run already ended")

// Store is what the service keeps its records in.
type Store interface {
	store.AgentStore
	GetPrincipal(ctx context.Context, id string) (store.Principal, error)
	PutMCPGrant(ctx context.Context, g store.MCPGrant) error
}

// Sandboxes is the sandbox manager (*sandbox.Manager).
type Sandboxes interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (store.Sandbox, error)
	Get(ctx context.Context, id string) (store.Sandbox, error)
	Agent(ctx context.Context, id string) (*agentclient.Client, error)
	Kill(ctx context.Context, id, reason string) error
	Pause(ctx context.Context, id string) (store.Sandbox, error)
	Resume(ctx context.Context, id string) (store.Sandbox, error)
	SetTimeout(ctx context.Context, id string, d time.Duration) (store.Sandbox, error)
	MaxTimeout() time.Duration
}

// Keys issues and revokes the agents' keys (*auth.Authenticator).
type Keys interface {
	CreatePrincipal(ctx context.Context, kind, name, createdBy string) (store.Principal, error)
	IssueKey(ctx context.Context, principalID, name string, scopes []auth.Scope) (string, store.APIKey, error)
	RevokeKey(ctx context.Context, id string) (store.APIKey, error)
}

// Config configures a Service. Store, Sandboxes, Keys and LogDir are
// required.
type Config struct {
	Store     Store
	Sandboxes Sandboxes
	Keys      Keys
	// Audit records runs' starts and ends; nil: not audited.
	Audit *govern.AuditLog
	Log   *slog.Logger
	// LogDir keeps each run's output (<run id>.log, NDJSON lines).
	LogDir string
	// PublicURL is the daemon's URL as runs see it (WARDEN_URL) when
	// LocalURL is "".
	PublicURL string
	// LocalURL is the daemon's URL as run sandboxes reach it over their
	// own network (http://warden.internal: network.LocalName, served by
	// wardend to the sandboxes of live runs); "" when there is no such
	// route. With it, a run whose spec gives no network gets an allowlist
	// with no rules (Warden's gateways only), and WARDEN_URL is LocalURL.
	LocalURL string
	// OpenAIProvider and AnthropicProvider name the LLM gateway providers
	// runs' OPENAI_BASE_URL and ANTHROPIC_BASE_URL point at ("" none).
	OpenAIProvider, AnthropicProvider string
	// MaxRuns caps runs at once over all agents (DefaultMaxRuns if 0).
	MaxRuns int
	// Now is the clock of cron triggers and records (time.Now if nil).
	Now func() time.Time
	// Tick is how often cron schedules are checked (1s if 0).
	Tick time.Duration
	// Secret reads the value of a secret by its owner and name (the
	// secrets store): Slack's signing secret and bot token. Nil: Slack
	// triggers are refused.
	Secret func(ctx context.Context, owner, name string) ([]byte, error)
	// Grants gives runs' sandboxes their spec's secrets; Policies attaches
	// specs' policies to agents' principals; Teams keeps team memories'
	// owners (enforce.go). Each nil: specs asking for it are refused.
	Grants   Grants
	Policies Policies
	Teams    Teams
}

// Service runs hosted agents.
type Service struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	replay replayCache

	mu        sync.Mutex
	active    map[string]*activeRun // by run ID
	endedKeys map[string]endedKey   // keys of recently ended runs (route.go)
	cron      map[string]time.Time  // next fire by agent ID + "/" + index
	kick      chan struct{}
	dedupe    *slack.Deduper // Slack event IDs (slackrun.go)
	closing   bool           // Close began: no run starts
	wg        sync.WaitGroup
	ctx       context.Context
	stop      context.CancelFunc
}

type activeRun struct {
	agentID   string
	trigger   string
	keyID     string      // set once issued, s.mu held
	sandboxID string      // set once the sandbox exists, s.mu held
	replied   atomic.Bool // a Slack reply was posted (slackrun.go)
	cancel    context.CancelCauseFunc
	done      chan struct{}
}

var (
	errCancelled = errors.New("cancelled")
	errTimedOut  = errors.New("timed out")
	errStopping  = errors.New("daemon stopping")
)

// New builds a Service; Start starts it.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Sandboxes == nil || cfg.Keys == nil || cfg.LogDir == "" {
		return nil, errors.New("agents: store, sandboxes, keys and log dir are required")
	}
	if err := os.MkdirAll(cfg.LogDir, 0o700); err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	if cfg.MaxRuns <= 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	s := &Service{cfg: cfg, log: cfg.Log, now: cfg.Now, active: map[string]*activeRun{}, cron: map[string]time.Time{},
		kick: make(chan struct{}, 1), endedKeys: map[string]endedKey{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s, nil
}

func newID(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Create defines an agent: its own principal (kind agent, named like it,
// created by the caller, who owns the agent), version 1, a webhook secret.
func (s *Service) Create(ctx context.Context, by auth.Identity, spec Spec) (store.Agent, error) {
	if err := spec.Validate(); err != nil {
		return store.Agent{}, invalid("agent spec: %v", err)
	}
	if _, err := s.cfg.Store.GetAgentByName(ctx, spec.Name); err == nil {
		return store.Agent{}, fmt.Errorf("agent %s: name in use: %w", spec.Name, store.ErrConflict)
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Agent{}, err
	}
	if err := s.checkEnforced(ctx, by, by.Principal.ID, spec, nil); err != nil {
		return store.Agent{}, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return store.Agent{}, fmt.Errorf("agent spec: %w", err)
	}
	p, err := s.cfg.Keys.CreatePrincipal(ctx, store.PrincipalAgent, spec.Name, by.Principal.ID)
	if err != nil {
		return store.Agent{}, err
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	now := s.now().UTC()
	a := store.Agent{ID: newID("ag-"), Name: spec.Name, PrincipalID: p.ID, OwnerID: by.Principal.ID, Version: 1, Spec: raw,
		WebhookSecret: "whsec_" + hex.EncodeToString(secret), CreatedAt: now, UpdatedAt: now}
	if err := s.cfg.Store.CreateAgent(ctx, a); err != nil {
		return store.Agent{}, err
	}
	if err := s.grant(ctx, a, spec, by); err != nil {
		return a, err
	}
	s.attach(a, &spec)
	s.audit(ctx, by.Principal.ID, "agent.created", a.Name, map[string]any{"principal": p.ID, "version": 1})
	return a, nil
}

func (s *Service) grant(ctx context.Context, a store.Agent, spec Spec, by auth.Identity) error {
	for _, id := range spec.MCPServers {
		err := s.cfg.Store.PutMCPGrant(ctx, store.MCPGrant{ServerID: id, PrincipalID: a.PrincipalID, CreatedAt: s.now().UTC(), CreatedBy: by.Principal.ID})
		if errors.Is(err, store.ErrNotFound) {
			return invalid("mcp_servers: virtual server %q does not exist", id)
		}
		if err != nil {
			return fmt.Errorf("grant mcp server %s: %w", id, err)
		}
	}
	return nil
}

// Update stores spec as the agent's next version; runs that started keep
// theirs.
func (s *Service) Update(ctx context.Context, by auth.Identity, a store.Agent, spec Spec) (store.Agent, error) {
	if err := spec.Validate(); err != nil {
		return store.Agent{}, invalid("agent spec: %v", err)
	}
	if spec.Name != a.Name {
		return store.Agent{}, invalid("agent spec: name %q: an agent cannot be renamed (it is %q)", spec.Name, a.Name)
	}
	var prev *Spec
	if old, err := ParseSpec(a.Spec); err == nil {
		prev = &old
	}
	if err := s.checkEnforced(ctx, by, a.OwnerID, spec, prev); err != nil {
		return store.Agent{}, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return store.Agent{}, fmt.Errorf("agent spec: %w", err)
	}
	if err := s.grant(ctx, a, spec, by); err != nil {
		return store.Agent{}, err
	}
	up, err := s.cfg.Store.UpdateAgentSpec(ctx, a.ID, raw, by.Principal.ID, s.now().UTC())
	if err != nil {
		return store.Agent{}, err
	}
	s.attach(up, &spec)
	// The persistent sandbox's grants follow the new version at once (a
	// removed secret is revoked); new placeholders reach it at its next run.
	if up.SandboxID != "" {
		if _, err := s.syncSecrets(ctx, up, spec, up.SandboxID, false); err != nil {
			s.log.Warn("agents: re-sync the persistent sandbox's secrets", "agent", a.Name, "err", err)
		}
	}
	s.mu.Lock()
	s.forgetCron(a.ID)
	s.mu.Unlock()
	s.audit(ctx, by.Principal.ID, "agent.updated", a.Name, map[string]any{"version": up.Version})
	return up, nil
}

// Delete cancels the agent's runs, kills its persistent sandbox and
// removes it with its versions and runs (logs included).
func (s *Service) Delete(ctx context.Context, by auth.Identity, a store.Agent) error {
	var waits []chan struct{}
	s.mu.Lock()
	for _, ar := range s.active {
		if ar.agentID == a.ID {
			ar.cancel(errCancelled)
			waits = append(waits, ar.done)
		}
	}
	s.forgetCron(a.ID)
	s.mu.Unlock()
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	runs, _ := s.cfg.Store.ListAgentRuns(ctx, store.AgentRunFilter{AgentID: a.ID, Limit: store.MaxPageSize})
	if a.SandboxID != "" {
		if err := s.cfg.Sandboxes.Kill(ctx, a.SandboxID, "agent deleted"); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("agents: kill the persistent sandbox", "agent", a.Name, "sandbox", a.SandboxID, "err", err)
		}
	}
	if err := s.cfg.Store.DeleteAgent(ctx, a.ID); err != nil {
		return err
	}
	s.attach(a, nil)
	for _, r := range runs {
		os.Remove(s.logPath(r.ID))
	}
	s.audit(ctx, by.Principal.ID, "agent.deleted", a.Name, nil)
	return nil
}

// Trigger queues a run of the agent's current version.
func (s *Service) Trigger(ctx context.Context, a store.Agent, trigger, by string, input json.RawMessage) (store.AgentRun, error) {
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if len(input) > MaxInputBytes {
		return store.AgentRun{}, invalid("input: %d bytes, at most %d", len(input), MaxInputBytes)
	}
	if !json.Valid(input) {
		return store.AgentRun{}, invalid("input is not JSON")
	}
	r := store.AgentRun{ID: newID("run-"), AgentID: a.ID, Version: a.Version, Trigger: trigger, Input: input,
		State: store.RunQueued, CreatedBy: by, CreatedAt: s.now().UTC()}
	if err := s.cfg.Store.CreateAgentRun(ctx, r); err != nil {
		return store.AgentRun{}, err
	}
	s.audit(ctx, by, "agent.run_queued", a.Name, map[string]any{"run": r.ID, "trigger": trigger, "version": a.Version})
	s.poke()
	return r, nil
}

// Cancel cancels a queued or running run; it returns once the run ended
// (or ctx did).
func (s *Service) Cancel(ctx context.Context, id string) (store.AgentRun, error) {
	s.mu.Lock()
	ar := s.active[id]
	if ar != nil {
		ar.cancel(errCancelled)
	}
	s.mu.Unlock()
	if ar != nil {
		select {
		case <-ar.done:
		case <-ctx.Done():
			return store.AgentRun{}, ctx.Err()
		}
		return s.cfg.Store.GetAgentRun(ctx, id)
	}
	var ended bool
	r, err := s.cfg.Store.UpdateAgentRun(ctx, id, func(r *store.AgentRun) error {
		if r.State != store.RunQueued {
			ended = true
			return nil
		}
		r.State, r.Reason, r.EndedAt = store.RunCancelled, "cancelled before it started", s.now().UTC()
		return nil
	})
	if err != nil {
		return store.AgentRun{}, err
	}
	if ended && !store.RunTerminal(r.State) {
		// Running but not ours yet (starting): wait for it.
		return r, fmt.Errorf("run %s is starting; try again: %w", id, store.ErrConflict)
	}
	if ended {
		return r, fmt.Errorf("run %s: %w", id, ErrNotCancellable)
	}
	return r, nil
}

// Start recovers the runs an earlier daemon left and starts the
// dispatcher and the cron loop until Close.
func (s *Service) Start(ctx context.Context) error {
	if err := s.recover(ctx); err != nil {
		return err
	}
	if err := s.attachAll(ctx); err != nil {
		return err
	}
	s.wg.Add(1)
	go s.loop()
	return nil
}

// Close cancels the live runs (they end failed, "daemon stopping") and
// waits for them.
func (s *Service) Close() {
	// The runs first, with their cause: cancelling the parent would give
	// them context.Canceled.
	s.mu.Lock()
	s.closing = true
	for _, ar := range s.active {
		ar.cancel(errStopping)
	}
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

func (s *Service) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Service) loop() {
	defer s.wg.Done()
	tick := s.cfg.Tick
	if tick <= 0 {
		tick = time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	s.dispatch()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
			s.CronTick(s.now())
		}
		s.dispatch()
	}
}

// recover ends the runs an earlier daemon left running (failed, "daemon
// restarted"): their processes died with it or cannot be reattached. The
// logs stay; the fresh sandboxes are killed, the keys revoked. Queued
// runs stay queued.
func (s *Service) recover(ctx context.Context) error {
	runs, err := s.cfg.Store.ListAgentRuns(ctx, store.AgentRunFilter{States: []string{store.RunRunning}, Limit: store.MaxPageSize})
	if err != nil {
		return fmt.Errorf("agents: recover runs: %w", err)
	}
	for _, r := range runs {
		s.log.Warn("agents: a run was left running by an earlier daemon: marking it failed", "run", r.ID)
		s.appendLog(r.ID, "system", "run interrupted: "+ReasonRestarted+"\n")
		a, aerr := s.cfg.Store.GetAgent(ctx, r.AgentID)
		persistent := aerr == nil && a.SandboxID != "" && a.SandboxID == r.SandboxID
		if r.SandboxID != "" && !persistent {
			if err := s.cfg.Sandboxes.Kill(ctx, r.SandboxID, "agent run ended: "+ReasonRestarted); err != nil && !errors.Is(err, store.ErrNotFound) {
				s.log.Warn("agents: kill a recovered run's sandbox", "run", r.ID, "sandbox", r.SandboxID, "err", err)
			}
		}
		if r.KeyID != "" {
			if _, err := s.cfg.Keys.RevokeKey(ctx, r.KeyID); err != nil && !errors.Is(err, store.ErrNotFound) {
				s.log.Warn("agents: revoke a recovered run's key", "run", r.ID, "err", err)
			}
		}
		if _, err := s.cfg.Store.UpdateAgentRun(ctx, r.ID, func(x *store.AgentRun) error {
			x.State, x.Reason, x.EndedAt = store.RunFailed, ReasonRestarted, s.now().UTC()
			return nil
		}); err != nil {
			return fmt.Errorf("agents: recover run %s: %w", r.ID, err)
		}
		s.audit(ctx, "system", "agent.run_ended", r.AgentID, map[string]any{"run": r.ID, "state": store.RunFailed, "reason": ReasonRestarted})
	}
	return nil
}

// dispatch starts queued runs, oldest first, within the limits.
func (s *Service) dispatch() {
	ctx := s.ctx
	if ctx.Err() != nil {
		return
	}
	queued, err := s.cfg.Store.ListAgentRuns(ctx, store.AgentRunFilter{States: []string{store.RunQueued}, Limit: store.MaxPageSize})
	if err != nil {
		s.log.Warn("agents: list queued runs", "err", err)
		return
	}
	slices.Reverse(queued)
	agents := map[string]*store.Agent{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	for _, r := range queued {
		if len(s.active) >= s.cfg.MaxRuns {
			return
		}
		a, ok := agents[r.AgentID]
		if !ok {
			got, err := s.cfg.Store.GetAgent(ctx, r.AgentID)
			if err != nil {
				continue
			}
			a = &got
			agents[r.AgentID] = a
		}
		spec, err := s.specOf(ctx, *a, r.Version)
		if err != nil {
			s.finish(ctx, r, store.RunFailed, "agent spec: "+err.Error(), nil)
			continue
		}
		if s.activeFor(a.ID, "") >= spec.Concurrency {
			continue
		}
		started, err := s.cfg.Store.UpdateAgentRun(ctx, r.ID, func(x *store.AgentRun) error {
			if x.State != store.RunQueued {
				return errors.New("no longer queued")
			}
			x.State, x.StartedAt = store.RunRunning, s.now().UTC()
			return nil
		})
		if err != nil {
			continue
		}
		rctx, cancel := context.WithCancelCause(ctx)
		ar := &activeRun{agentID: a.ID, trigger: r.Trigger, cancel: cancel, done: make(chan struct{})}
		s.active[r.ID] = ar
		s.wg.Add(1)
		go func(a store.Agent) {
			defer s.wg.Done()
			s.execute(rctx, ar, a, spec, started)
		}(*a)
	}
}

// activeFor counts the agent's live runs (of trigger, "" any); s.mu held.
func (s *Service) activeFor(agentID, trigger string) int {
	n := 0
	for _, ar := range s.active {
		if ar.agentID == agentID && (trigger == "" || ar.trigger == trigger) {
			n++
		}
	}
	return n
}

// specOf is the spec of the agent's version v.
func (s *Service) specOf(ctx context.Context, a store.Agent, v int) (Spec, error) {
	raw := a.Spec
	if v != a.Version {
		vs, err := s.cfg.Store.ListAgentVersions(ctx, a.ID)
		if err != nil {
			return Spec{}, err
		}
		raw = nil
		for _, x := range vs {
			if x.Version == v {
				raw = x.Spec
			}
		}
		if raw == nil {
			return Spec{}, fmt.Errorf("version %d: %w", v, store.ErrNotFound)
		}
	}
	return ParseSpec(raw)
}

// finish records a run's end.
func (s *Service) finish(ctx context.Context, r store.AgentRun, state, reason string, exit *int) store.AgentRun {
	ctx = context.WithoutCancel(ctx)
	out, err := s.cfg.Store.UpdateAgentRun(ctx, r.ID, func(x *store.AgentRun) error {
		x.State, x.Reason, x.ExitCode, x.EndedAt = state, reason, exit, s.now().UTC()
		x.SandboxID = r.SandboxID
		x.KeyID = r.KeyID
		return nil
	})
	if err != nil {
		s.log.Error("agents: record a run's end", "run", r.ID, "err", err)
		return r
	}
	d := map[string]any{"run": r.ID, "state": state, "reason": reason}
	if exit != nil {
		d["exit_code"] = *exit
	}
	if !out.StartedAt.IsZero() {
		d["duration_ms"] = out.EndedAt.Sub(out.StartedAt).Milliseconds()
	}
	s.audit(ctx, "system", "agent.run_ended", r.AgentID, d)
	return out
}

func (s *Service) audit(ctx context.Context, principal, name, target string, detail map[string]any) {
	if s.cfg.Audit == nil {
		return
	}
	s.cfg.Audit.Write(context.WithoutCancel(ctx), govern.AuditEvent{Principal: principal, Name: name, Target: target,
		Outcome: govern.AuditSuccess, Detail: detail})
}

// RunForKey returns the run an API key was issued for (each run has its
// own key), if it is live.
func (s *Service) RunForKey(ctx context.Context, keyID string) (store.AgentRun, bool) {
	s.mu.Lock()
	var id string
	for runID, ar := range s.active {
		if keyID != "" && ar.keyID == keyID {
			id = runID
		}
	}
	s.mu.Unlock()
	if id == "" {
		return store.AgentRun{}, false
	}
	r, err := s.cfg.Store.GetAgentRun(ctx, id)
	if err != nil || r.KeyID != keyID {
		return store.AgentRun{}, false
	}
	return r, true
}

// execute runs r to its end.
func (s *Service) execute(ctx context.Context, ar *activeRun, a store.Agent, spec Spec, r store.AgentRun) {
	defer func() {
		s.mu.Lock()
		delete(s.active, r.ID)
		if ar.keyID != "" {
			s.endedKeys[ar.keyID] = endedKey{run: r.ID, at: time.Now()}
		}
		s.mu.Unlock()
		close(ar.done)
		s.poke()
	}()
	s.audit(ctx, "system", "agent.run_started", a.Name, map[string]any{"run": r.ID, "trigger": r.Trigger, "version": r.Version})
	tctx, cancel := context.WithTimeoutCause(ctx, spec.Timeout(), errTimedOut)
	defer cancel()
	bg := context.WithoutCancel(ctx)
	logf := func(format string, args ...any) { s.appendLog(r.ID, "system", fmt.Sprintf(format, args...)+"\n") }

	// release pauses the persistent sandbox or kills a fresh one: before
	// the end is recorded, so that an ended run holds no sandbox.
	release := func() {}
	var stdout tailBuffer
	end := func(state, reason string, exit *int) {
		release()
		if r.Trigger == TriggerSlack && !ar.replied.Load() {
			s.slackFinalReply(bg, a, spec, r, state, reason, stdout.String())
		}
		if reason != "" {
			logf("run %s: %s", state, reason)
		} else {
			logf("run %s", state)
		}
		if r.KeyID != "" {
			if _, err := s.cfg.Keys.RevokeKey(bg, r.KeyID); err != nil {
				s.log.Warn("agents: revoke a run's key", "run", r.ID, "err", err)
			}
		}
		s.finish(bg, r, state, reason, exit)
	}
	failed := func(err error) {
		switch context.Cause(tctx) {
		case errCancelled:
			end(store.RunCancelled, "cancelled", nil)
		case errTimedOut:
			end(store.RunTimedOut, fmt.Sprintf("timed out after %s", spec.Timeout()), nil)
		case errStopping:
			end(store.RunFailed, "daemon stopping", nil)
		default:
			end(store.RunFailed, err.Error(), nil)
		}
	}

	scopes, _ := auth.ParseScopes(spec.Scopes)
	key, rec, err := s.cfg.Keys.IssueKey(tctx, a.PrincipalID, "agent run "+r.ID, scopes)
	if err != nil {
		failed(fmt.Errorf("issue the run's key: %w", err))
		return
	}
	r.KeyID = rec.ID
	s.mu.Lock()
	ar.keyID = rec.ID
	s.mu.Unlock()
	if r, err = s.cfg.Store.UpdateAgentRun(bg, r.ID, func(x *store.AgentRun) error { x.KeyID = rec.ID; return nil }); err != nil {
		failed(err)
		return
	}
	sb, err := s.sandboxFor(tctx, a, spec, r)
	if err != nil {
		failed(fmt.Errorf("sandbox: %w", err))
		return
	}
	r.SandboxID = sb.ID
	s.mu.Lock()
	ar.sandboxID = sb.ID
	s.mu.Unlock()
	if r, err = s.cfg.Store.UpdateAgentRun(bg, r.ID, func(x *store.AgentRun) error { x.SandboxID = sb.ID; return nil }); err != nil {
		failed(err)
		return
	}
	persistent := spec.Sandbox == SandboxPersistent
	release = func() {
		if persistent {
			if _, err := s.cfg.Sandboxes.Pause(bg, sb.ID); err != nil {
				s.log.Warn("agents: pause the persistent sandbox", "agent", a.Name, "sandbox", sb.ID, "err", err)
			}
			return
		}
		if err := s.cfg.Sandboxes.Kill(bg, sb.ID, "agent run ended"); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("agents: kill a run's sandbox", "run", r.ID, "sandbox", sb.ID, "err", err)
		}
	}
	client, err := s.cfg.Sandboxes.Agent(tctx, sb.ID)
	if err != nil {
		failed(fmt.Errorf("sandbox agent: %w", err))
		return
	}
	if err := client.WriteFile(tctx, InputPath, "", 0o644, bytesReader(r.Input)); err != nil {
		failed(fmt.Errorf("write the input file: %w", err))
		return
	}
	env := s.runEnv(a, spec, r, key, sb.ID)
	// The version's secrets: grants of this sandbox (revoked with it, or
	// kept in step with the spec for a persistent one); the run's process
	// gets the placeholders.
	genv, err := s.syncSecrets(tctx, a, spec, sb.ID, true)
	if err != nil {
		failed(fmt.Errorf("secrets: %w", err))
		return
	}
	for k, v := range genv {
		env[k] = v
	}
	logf("run %s of %s (version %d, trigger %s) in sandbox %s", r.ID, a.Name, r.Version, r.Trigger, sb.ID)
	res, err := client.Run(tctx, agentclient.Cmd{Args: spec.Command, Env: env, Dir: spec.Workdir,
		Stdout: io.MultiWriter(&logWriter{s: s, run: r.ID, stream: "stdout"}, &stdout), Stderr: &logWriter{s: s, run: r.ID, stream: "stderr"}})
	if err != nil || tctx.Err() != nil {
		if persistent && res.Pid != 0 {
			// The process outlives its stream: end it, keep the sandbox.
			sctx, c := context.WithTimeout(bg, 10*time.Second)
			_ = client.Signal(sctx, res.Pid, syscall.SIGKILL)
			c()
		}
		if err == nil {
			err = context.Cause(tctx)
		}
		failed(err)
		return
	}
	code := res.ExitCode
	switch {
	case res.Error != "" && code == 0:
		end(store.RunFailed, res.Error, nil)
	case code == 0 && res.Signal == 0:
		end(store.RunSucceeded, "", &code)
	case res.Signal != 0:
		end(store.RunFailed, fmt.Sprintf("killed by signal %d", res.Signal), &code)
	default:
		end(store.RunFailed, fmt.Sprintf("exit code %d", code), &code)
	}
}

// sandboxFor returns the run's sandbox: a fresh one, or the agent's
// persistent sandbox (resumed, or made when it has none alive).
func (s *Service) sandboxFor(ctx context.Context, a store.Agent, spec Spec, r store.AgentRun) (store.Sandbox, error) {
	timeout := min(spec.Timeout()+time.Minute, s.cfg.Sandboxes.MaxTimeout())
	if spec.Sandbox == SandboxPersistent && a.SandboxID != "" {
		sb, err := s.cfg.Sandboxes.Get(ctx, a.SandboxID)
		if err == nil {
			switch sandbox.State(sb.State) {
			case sandbox.StatePaused:
				if sb, err = s.cfg.Sandboxes.Resume(ctx, sb.ID); err != nil {
					return store.Sandbox{}, fmt.Errorf("resume %s: %w", a.SandboxID, err)
				}
				fallthrough
			case sandbox.StateRunning:
				if sb, err = s.cfg.Sandboxes.SetTimeout(ctx, sb.ID, timeout); err != nil {
					return store.Sandbox{}, err
				}
				return sb, nil
			}
		}
		s.log.Info("agents: the persistent sandbox is gone: making another", "agent", a.Name, "sandbox", a.SandboxID)
	}
	sb, err := s.cfg.Sandboxes.Create(ctx, sandbox.CreateRequest{
		Owner: a.PrincipalID, Template: spec.Template, CPUMillis: spec.Limits.CPUMillis, MemoryMB: spec.Limits.MemoryMB,
		DiskMB: spec.Limits.DiskMB, Timeout: timeout, Network: s.runNetwork(spec),
		Metadata: map[string]string{MetaAgent: a.Name, MetaRun: r.ID},
	})
	if err != nil {
		return store.Sandbox{}, err
	}
	if spec.Sandbox == SandboxPersistent {
		if err := s.cfg.Store.SetAgentSandbox(context.WithoutCancel(ctx), a.ID, sb.ID); err != nil {
			s.cfg.Sandboxes.Kill(context.WithoutCancel(ctx), sb.ID, "agent persistent sandbox not recorded")
			return store.Sandbox{}, err
		}
	}
	return sb, nil
}

func (s *Service) logPath(runID string) string { return filepath.Join(s.cfg.LogDir, runID+".log") }
