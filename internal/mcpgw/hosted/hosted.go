// Package hosted runs hosted MCP connectors: a stdio MCP server (an npm or
// Python package, or a binary in a template) started inside a Warden
// sandbox, with the connector's network policy and environment, and exposed
// to the gateway as a go-sdk mcp.Transport whose messages travel over the
// process's stdin and stdout through the sandbox agent's process API.
//
// A Runner keeps one sandbox per connector, or one per calling principal
// for per-user connectors (their credentials then live in that principal's
// sandbox only). Every Connect of a Transport starts a fresh server process
// in it (a stdio server speaks to one client); closing the connection
// closes the process's stdin, then kills it after a grace period. A server
// process that exits ends its connection (the client sees EOF) and the next
// Connect starts another; a sandbox that dies is replaced by the next
// Connect or, while the connector is in use, by the Runner's supervisor
// (Run), with exponential backoff after failures. Sandboxes carry the
// metadata MetaHosted, so that Reap can kill those a previous daemon left,
// and Close kills all of them at shutdown.
package hosted

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/agentclient"
	processpb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// Metadata keys of hosted connectors' sandboxes.
const (
	MetaHosted    = "warden.mcp.hosted" // "true"
	MetaConnector = "warden.mcp.connector"
	MetaPrincipal = "warden.mcp.principal" // per-user connectors only
)

// Defaults of Config's zero fields.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = time.Minute
	DefaultGrace       = 5 * time.Second
	DefaultCheck       = 5 * time.Second
	// quickExit is how soon after its start a server's exit counts as a
	// failure (backed off) rather than a normal end.
	quickExit = 10 * time.Second
	// stderrKeep is how much of a server's stderr is kept for the log.
	stderrKeep = 4 << 10
)

// ErrClosed is returned once the Runner is closed.
var ErrClosed = errors.New("hosted connectors are shut down")

// Sandboxes is what a Runner needs of the sandbox manager
// (*sandbox.Manager).
type Sandboxes interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (store.Sandbox, error)
	Get(ctx context.Context, id string) (store.Sandbox, error)
	List(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, string, error)
	Agent(ctx context.Context, id string) (*agentclient.Client, error)
	SetTimeout(ctx context.Context, id string, d time.Duration) (store.Sandbox, error)
	Kill(ctx context.Context, id, reason string) error
}

// Connectors looks connectors up (store.MCPStore); the Runner asks it for
// a connector's owner, who owns its sandboxes.
type Connectors interface {
	GetConnector(ctx context.Context, id string) (store.MCPConnector, error)
}

// Config configures a Runner.
type Config struct {
	Sandboxes Sandboxes
	// Connectors gives each connector's owner, the owner of its
	// sandboxes; Owner, if set, is used instead (then Connectors may be
	// nil).
	Connectors Connectors
	Owner      string
	// Env, if set, returns extra environment for a server process of
	// connectorID started for principalID (per-user connectors) or for
	// every principal (principalID ""): the connector's credentials, read
	// from the secrets store by the gateway. It is passed to the process
	// only, never stored with the sandbox.
	Env func(ctx context.Context, connectorID, principalID string) (map[string]string, error)
	// Setup, if set, runs once in each new sandbox before any server
	// starts (tests put their server binary there).
	Setup func(ctx context.Context, sb store.Sandbox, agent *agentclient.Client) error
	// IdleTimeout is a sandbox's timeout, renewed while its connector is
	// in use; an idle sandbox ends then and the next Connect starts
	// another.
	IdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart after a
	// failed sandbox start or a server that exits right after starting.
	MinBackoff, MaxBackoff time.Duration
	// Grace is how long a closed connection's server has to exit after
	// its stdin closes before it is killed.
	Grace time.Duration
	// Check is how often the supervisor looks at sandboxes.
	Check time.Duration
	// MaxLineLength caps one JSON-RPC message from a server (0: the
	// go-sdk's default).
	MaxLineLength int
	Log           *slog.Logger
}

// Runner runs hosted connectors' sandboxes and server processes.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	poke chan struct{}

	mu     sync.Mutex
	closed bool
	insts  map[instKey]*instance
}

type instKey struct{ connector, principal string }

// instance is one sandbox slot: a connector's, or a principal's of a
// per-user connector.
type instance struct {
	r    *Runner
	key  instKey
	spec *mcpgw.HostedSpec

	// mu is held while the sandbox is checked or made; it guards spec,
	// wantHash, specHash, sbID and extended.
	mu       sync.Mutex
	wantHash string // of spec
	specHash string // of the spec sbID was made from
	sbID     string
	extended time.Time

	// Guarded by r.mu.
	failures int
	nextTry  time.Time
	conns    map[*conn]struct{}
	lastUsed time.Time
	gone     bool // forgotten or closed: no new sandbox
}

// New returns a Runner. Call Run to supervise, Reap at startup and Close
// at shutdown.
func New(cfg Config) (*Runner, error) {
	if cfg.Sandboxes == nil {
		return nil, errors.New("hosted: no sandbox manager")
	}
	if cfg.Owner == "" && cfg.Connectors == nil {
		return nil, errors.New("hosted: neither an owner nor a connector store")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Check <= 0 {
		cfg.Check = DefaultCheck
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, log: log, poke: make(chan struct{}, 1), insts: map[instKey]*instance{}}, nil
}

// NetworkPolicy is the sandbox network policy of a hosted spec: none for
// an empty list, "*" for open egress, else an allow list of host names
// ("*.example.com" for every name below one) and CIDRs on ports 80 and
// 443.
func NetworkPolicy(spec *mcpgw.HostedSpec) (*network.Policy, error) {
	if len(spec.Network) == 0 {
		return nil, nil
	}
	if len(spec.Network) == 1 && spec.Network[0] == "*" {
		return &network.Policy{Mode: network.ModeOpen}, nil
	}
	p := network.Policy{Mode: network.ModeAllowlist}
	for _, h := range spec.Network {
		if strings.Contains(h, "/") {
			p.Allow = append(p.Allow, network.Rule{CIDR: h})
		} else {
			p.Allow = append(p.Allow, network.Rule{Host: h})
		}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	return &p, nil
}

// Transport returns the transport of connector connectorID (its hosted
// spec raw) for principalID: each Connect starts a server process in the
// connector's sandbox (the principal's, for per-user connectors), making
// the sandbox first if there is none. A changed spec replaces the
// sandbox.
func (r *Runner) Transport(ctx context.Context, connectorID string, raw json.RawMessage, principalID string) (mcp.Transport, error) {
	v, err := mcpgw.ParseConnectorSpec(store.MCPConnectorHosted, raw)
	if err != nil {
		return nil, fmt.Errorf("hosted connector %s: %w", connectorID, err)
	}
	spec := v.(*mcpgw.HostedSpec)
	if _, err := NetworkPolicy(spec); err != nil {
		return nil, fmt.Errorf("hosted connector %s: %w", connectorID, err)
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])
	key := instKey{connector: connectorID}
	if spec.PerUser {
		if principalID == "" {
			return nil, fmt.Errorf("hosted connector %s runs per user: no principal", connectorID)
		}
		key.principal = principalID
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	inst := r.insts[key]
	if inst == nil {
		inst = &instance{r: r, key: key, conns: map[*conn]struct{}{}}
		r.insts[key] = inst
	}
	return &transport{inst: inst, spec: spec, hash: hash, principal: principalID}, nil
}

// transport is one connector's mcp.Transport for one principal.
type transport struct {
	inst      *instance
	spec      *mcpgw.HostedSpec
	hash      string
	principal string
}

// Connect starts a server process and returns its connection.
func (t *transport) Connect(ctx context.Context) (mcp.Connection, error) {
	inst := t.inst
	sb, agent, err := inst.ensure(ctx, t.spec, t.hash)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	if inst.r.cfg.Env != nil {
		env, err = inst.r.cfg.Env(ctx, inst.key.connector, inst.key.principal)
		if err != nil {
			return nil, fmt.Errorf("hosted connector %s: credentials: %w", inst.key.connector, err)
		}
	}
	c, err := inst.start(ctx, sb, agent, t.spec, env)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ensure returns the instance's running sandbox, making one (after the
// backoff, if the last attempts failed) when there is none.
func (in *instance) ensure(ctx context.Context, spec *mcpgw.HostedSpec, hash string) (store.Sandbox, *agentclient.Client, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.isGone() {
		return store.Sandbox{}, nil, ErrClosed
	}
	in.spec, in.wantHash = spec, hash
	in.touch()
	// After failures (a sandbox that would not start, a server that
	// exited at once) the next start waits.
	if err := in.backoff(ctx); err != nil {
		return store.Sandbox{}, nil, err
	}
	if in.sbID != "" && in.specHash != hash {
		in.r.log.Info("hosted connector changed; replacing its sandbox", "connector", in.key.connector, "sandbox", in.sbID)
		in.killSandbox(ctx, "mcp hosted connector changed")
	}
	if in.sbID != "" {
		sb, agent, err := in.alive(ctx)
		if err == nil {
			return sb, agent, nil
		}
		in.r.log.Warn("hosted connector sandbox gone; starting another", "connector", in.key.connector, "sandbox", in.sbID, "err", err)
		in.killSandbox(ctx, "mcp hosted connector sandbox unusable")
	}
	if err := in.backoff(ctx); err != nil {
		return store.Sandbox{}, nil, err
	}
	sb, agent, err := in.create(ctx, spec)
	if err != nil {
		in.failed()
		return store.Sandbox{}, nil, fmt.Errorf("hosted connector %s: %w", in.key.connector, err)
	}
	in.sbID, in.specHash = sb.ID, hash
	in.extended = time.Now()
	return sb, agent, nil
}

// backoff waits until the next start may be tried.
func (in *instance) backoff(ctx context.Context) error {
	wait := time.Until(in.retryAt())
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("hosted connector %s: restarting after failures: %w", in.key.connector, ctx.Err())
	case <-t.C:
	}
	if in.isGone() {
		return ErrClosed
	}
	return nil
}

// alive returns the instance's sandbox if it is running.
func (in *instance) alive(ctx context.Context) (store.Sandbox, *agentclient.Client, error) {
	sb, err := in.r.cfg.Sandboxes.Get(ctx, in.sbID)
	if err != nil {
		return sb, nil, err
	}
	if sandbox.State(sb.State) != sandbox.StateRunning {
		return sb, nil, fmt.Errorf("sandbox is %s", sb.State)
	}
	agent, err := in.r.cfg.Sandboxes.Agent(ctx, in.sbID)
	if err != nil {
		return sb, nil, err
	}
	return sb, agent, nil
}

// create makes and sets up a sandbox for the instance. A sandbox whose
// setup fails is killed.
func (in *instance) create(ctx context.Context, spec *mcpgw.HostedSpec) (store.Sandbox, *agentclient.Client, error) {
	cfg := in.r.cfg
	owner := cfg.Owner
	if owner == "" {
		c, err := cfg.Connectors.GetConnector(ctx, in.key.connector)
		if err != nil {
			return store.Sandbox{}, nil, fmt.Errorf("connector: %w", err)
		}
		owner = c.OwnerID
	}
	pol, err := NetworkPolicy(spec)
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	md := map[string]string{MetaHosted: "true", MetaConnector: in.key.connector}
	if in.key.principal != "" {
		md[MetaPrincipal] = in.key.principal
	}
	sb, err := cfg.Sandboxes.Create(ctx, sandbox.CreateRequest{
		Owner: owner, Template: spec.Template, Env: spec.Env, Metadata: md,
		Timeout: cfg.IdleTimeout, Network: pol,
	})
	if err != nil {
		return store.Sandbox{}, nil, fmt.Errorf("create sandbox: %w", err)
	}
	agent, err := cfg.Sandboxes.Agent(ctx, sb.ID)
	if err == nil && cfg.Setup != nil {
		err = cfg.Setup(ctx, sb, agent)
	}
	if err != nil {
		cfg.Sandboxes.Kill(context.WithoutCancel(ctx), sb.ID, "mcp hosted connector setup failed")
		return store.Sandbox{}, nil, fmt.Errorf("set up sandbox %s: %w", sb.ID, err)
	}
	in.r.log.Info("hosted connector sandbox started", "connector", in.key.connector, "principal", in.key.principal, "sandbox", sb.ID)
	return sb, agent, nil
}

// failed records a failed start: the next one waits longer.
func (in *instance) failed() {
	in.r.mu.Lock()
	defer in.r.mu.Unlock()
	in.failures++
	d := in.r.cfg.MinBackoff << min(in.failures-1, 16)
	if d > in.r.cfg.MaxBackoff || d <= 0 {
		d = in.r.cfg.MaxBackoff
	}
	in.nextTry = time.Now().Add(d)
}

// succeeded clears the backoff: a server ran for a while.
func (in *instance) succeeded() {
	in.r.mu.Lock()
	in.failures, in.nextTry = 0, time.Time{}
	in.r.mu.Unlock()
}

func (in *instance) retryAt() time.Time {
	in.r.mu.Lock()
	defer in.r.mu.Unlock()
	return in.nextTry
}

// killSandbox kills the instance's sandbox (if any) and forgets it; its
// connections end with their processes. Called with in.mu held.
func (in *instance) killSandbox(ctx context.Context, reason string) {
	if in.sbID == "" {
		return
	}
	if err := in.r.cfg.Sandboxes.Kill(context.WithoutCancel(ctx), in.sbID, reason); err != nil && !errors.Is(err, store.ErrNotFound) {
		in.r.log.Debug("kill hosted connector sandbox", "sandbox", in.sbID, "err", err)
	}
	in.sbID, in.specHash = "", ""
}

func (in *instance) touch() {
	in.r.mu.Lock()
	in.lastUsed = time.Now()
	in.r.mu.Unlock()
}

func (in *instance) isGone() bool {
	in.r.mu.Lock()
	defer in.r.mu.Unlock()
	return in.gone
}

// start starts the server process in sb and returns its connection.
func (in *instance) start(ctx context.Context, sb store.Sandbox, agent *agentclient.Client, spec *mcpgw.HostedSpec, env map[string]string) (*conn, error) {
	// The process outlives Connect's ctx: it ends with the connection.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := agent.Start(pctx, agentclient.Cmd{Args: spec.Command, Env: env, Stdin: strings.NewReader("")})
	if err != nil {
		cancel()
		in.serverFailed()
		return nil, fmt.Errorf("hosted connector %s: start %q: %w", in.key.connector, spec.Command[0], err)
	}
	// The first event says whether it started.
	var pid uint32
	for pid == 0 {
		if !stream.Receive() {
			err := stream.Err()
			stream.Close()
			cancel()
			in.serverFailed()
			if err == nil {
				err = errors.New("no start event")
			}
			return nil, fmt.Errorf("hosted connector %s: start %q: %w", in.key.connector, spec.Command[0], err)
		}
		ev := stream.Msg().GetEvent()
		if s := ev.GetStart(); s != nil {
			pid = s.GetPid()
		} else if e := ev.GetEnd(); e != nil {
			stream.Close()
			cancel()
			in.serverFailed()
			return nil, fmt.Errorf("hosted connector %s: %q did not start: %s", in.key.connector, spec.Command[0], orStatus(e.GetError(), e.GetStatus()))
		}
	}
	stdoutR, stdoutW := io.Pipe()
	c := &conn{
		in: in, agent: agent, pid: pid, sandbox: sb.ID, cancel: cancel,
		started: time.Now(), done: make(chan struct{}), stdout: stdoutR,
		stdin: &stdinWriter{ctx: pctx, agent: agent, pid: pid},
	}
	c.Connection, _ = (&mcp.IOTransport{Reader: stdoutR, Writer: c.stdin, MaxLineLength: in.r.cfg.MaxLineLength}).Connect(ctx)
	in.r.mu.Lock()
	in.conns[c] = struct{}{}
	in.r.mu.Unlock()
	go c.pump(stream, stdoutW)
	return c, nil
}

// serverFailed counts a server that could not start or exited at once.
func (in *instance) serverFailed() { in.failed() }

func orStatus(msg, status string) string {
	if msg != "" {
		return msg
	}
	return status
}

// conn is one server process's connection.
type conn struct {
	mcp.Connection
	in      *instance
	agent   *agentclient.Client
	pid     uint32
	sandbox string
	cancel  context.CancelFunc
	started time.Time
	stdout  *io.PipeReader
	stdin   *stdinWriter

	closeOnce sync.Once
	closing   bool // set before Close stops the process
	killed    bool // set before Close kills it
	mu        sync.Mutex
	done      chan struct{} // closed when the process has ended
	exit      string
}

// pump copies the process's stdout into the connection until it ends.
func (c *conn) pump(stream *connect.ServerStreamForClient[processpb.StartResponse], w *io.PipeWriter) {
	defer close(c.done)
	defer stream.Close()
	var stderr bytes.Buffer
	exit := "the stream ended"
	clean := false // exit code 0 without a signal
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			if out := d.GetStdout(); out != nil {
				if _, err := w.Write(out); err != nil {
					// The connection is closed; keep draining until the
					// process ends (Close stops it).
					continue
				}
			}
			if e := d.GetStderr(); e != nil {
				stderr.Write(e)
				if over := stderr.Len() - stderrKeep; over > 0 {
					stderr.Next(over)
				}
			}
		}
		if e := ev.GetEnd(); e != nil {
			exit = fmt.Sprintf("exit code %d", e.GetExitCode())
			clean = e.GetExitCode() == 0 && e.GetSignal() == 0
			if e.GetSignal() != 0 {
				exit = fmt.Sprintf("signal %d", e.GetSignal())
			}
			break
		}
	}
	if err := stream.Err(); err != nil {
		exit = "stream: " + err.Error()
	}
	c.mu.Lock()
	c.exit = exit
	closing, killed := c.closing, c.killed
	c.mu.Unlock()
	in := c.in
	in.r.mu.Lock()
	delete(in.conns, c)
	in.r.mu.Unlock()
	if !closing {
		in.r.log.Warn("hosted connector server ended", "connector", in.key.connector, "principal", in.key.principal,
			"sandbox", c.sandbox, "pid", c.pid, "exit", exit, "stderr", tail(stderr.String()))
		in.r.kick()
	}
	// A server that ends soon after it started, other than by exiting
	// cleanly or being killed after its connection closed, failed (the
	// connection may have closed first because writing to it failed).
	switch {
	case time.Since(c.started) >= quickExit:
		in.succeeded()
	case killed || closing && clean:
	default:
		if closing {
			in.r.log.Warn("hosted connector server failed", "connector", in.key.connector, "principal", in.key.principal,
				"sandbox", c.sandbox, "pid", c.pid, "exit", exit, "stderr", tail(stderr.String()))
		}
		in.serverFailed()
	}
	// Bookkeeping first: whoever sees the EOF sees the backoff too.
	w.CloseWithError(io.EOF)
	c.cancel()
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); len(s) > 512 && i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 512 {
		s = s[len(s)-512:]
	}
	return s
}

// Close ends the connection: stdin closes, and a server still running
// after the grace period is killed.
func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		err = c.Connection.Close() // closes stdout's reader and stdin
		go func() {
			t := time.NewTimer(c.in.r.cfg.Grace)
			defer t.Stop()
			select {
			case <-c.done:
				return
			case <-t.C:
			}
			c.mu.Lock()
			c.killed = true
			c.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c.agent.Signal(ctx, c.pid, syscall.SIGKILL)
			cancel()
			select {
			case <-c.done:
			case <-time.After(10 * time.Second):
				c.cancel()
			}
		}()
	})
	return err
}

// SessionID implements mcp.Connection.
func (c *conn) SessionID() string { return "" }

var _ mcp.Connection = (*conn)(nil)

// stdinWriter writes to a process's stdin through the agent; Close closes
// the process's stdin.
type stdinWriter struct {
	ctx   context.Context
	agent *agentclient.Client
	pid   uint32

	mu     sync.Mutex
	closed bool
}

func (w *stdinWriter) sel() *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: w.pid}}
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, io.ErrClosedPipe
	}
	in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: bytes.Clone(p)}}
	if _, err := w.agent.Process.SendInput(w.ctx, connect.NewRequest(&processpb.SendInputRequest{Process: w.sel(), Input: in})); err != nil {
		return 0, fmt.Errorf("server stdin: %w", err)
	}
	return len(p), nil
}

func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	_, err := w.agent.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: w.sel()}))
	return err
}

func (r *Runner) kick() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// Run supervises the sandboxes until ctx ends: a sandbox of a connector
// in use (an open connection, or a Connect within the idle timeout) that
// died is replaced, with backoff after failures, and sandboxes with open
// connections have their timeouts renewed.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.poke:
		}
		r.supervise(ctx)
	}
}

// supervise makes one pass over the instances.
func (r *Runner) supervise(ctx context.Context) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	insts := make([]*instance, 0, len(r.insts))
	for _, in := range r.insts {
		insts = append(insts, in)
	}
	r.mu.Unlock()
	for _, in := range insts {
		if ctx.Err() != nil {
			return
		}
		in.supervise(ctx)
	}
}

func (in *instance) supervise(ctx context.Context) {
	if !in.mu.TryLock() {
		return // a Connect is making its sandbox
	}
	defer in.mu.Unlock()
	r := in.r
	r.mu.Lock()
	gone, conns, lastUsed := in.gone, len(in.conns), in.lastUsed
	r.mu.Unlock()
	if gone || in.spec == nil {
		return
	}
	inUse := conns > 0 || time.Since(lastUsed) < r.cfg.IdleTimeout
	if in.sbID != "" {
		sb, err := r.cfg.Sandboxes.Get(ctx, in.sbID)
		if err == nil && sandbox.State(sb.State) == sandbox.StateRunning {
			if conns > 0 && time.Since(in.extended) > r.cfg.IdleTimeout/3 {
				if _, err := r.cfg.Sandboxes.SetTimeout(ctx, in.sbID, r.cfg.IdleTimeout); err == nil {
					in.extended = time.Now()
				}
			}
			return
		}
		reason := "not found"
		if err == nil {
			reason = sb.State + ": " + sb.EndReason
		}
		r.log.Warn("hosted connector sandbox ended", "connector", in.key.connector, "principal", in.key.principal, "sandbox", in.sbID, "reason", reason)
		in.killSandbox(ctx, "mcp hosted connector sandbox ended")
		if inUse && time.Since(lastUsed) < quickExit*6 {
			// It ended soon after use: maybe a crash; restarts back off.
			in.failed()
		}
	}
	if !inUse || time.Now().Before(in.retryAt()) {
		return
	}
	sb, _, err := in.create(ctx, in.spec)
	if err != nil {
		in.failed()
		r.log.Warn("hosted connector restart failed", "connector", in.key.connector, "err", err, "retry_in", time.Until(in.retryAt()).Round(time.Second))
		return
	}
	in.sbID, in.specHash = sb.ID, in.wantHash
	in.extended = time.Now()
}

// Forget stops connector connectorID's servers and kills its sandboxes
// (the connector was deleted); a later Transport starts afresh.
func (r *Runner) Forget(ctx context.Context, connectorID string) {
	r.mu.Lock()
	var insts []*instance
	for k, in := range r.insts {
		if k.connector == connectorID {
			in.gone = true
			insts = append(insts, in)
			delete(r.insts, k)
		}
	}
	r.mu.Unlock()
	for _, in := range insts {
		in.mu.Lock()
		in.killSandbox(ctx, "mcp hosted connector removed")
		in.mu.Unlock()
	}
}

// Close kills every hosted connector's sandbox (their servers with them)
// and refuses new transports and connections; for daemon shutdown.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	insts := make([]*instance, 0, len(r.insts))
	for k, in := range r.insts {
		in.gone = true
		insts = append(insts, in)
		delete(r.insts, k)
	}
	r.mu.Unlock()
	for _, in := range insts {
		in.mu.Lock()
		in.killSandbox(ctx, "mcp gateway shutting down")
		in.mu.Unlock()
	}
	return nil
}

// Reap kills hosted connectors' sandboxes this Runner does not know: those
// a previous daemon left running (call it at startup, before serving). It
// returns how many it killed.
func (r *Runner) Reap(ctx context.Context) (int, error) {
	known := map[string]bool{}
	r.mu.Lock()
	insts := make([]*instance, 0, len(r.insts))
	for _, in := range r.insts {
		insts = append(insts, in)
	}
	r.mu.Unlock()
	for _, in := range insts {
		if in.mu.TryLock() {
			known[in.sbID] = true
			in.mu.Unlock()
		} else {
			return 0, errors.New("hosted: reap while connectors start")
		}
	}
	n := 0
	f := store.SandboxFilter{
		Metadata: map[string]string{MetaHosted: "true"},
		States:   []string{string(sandbox.StateStarting), string(sandbox.StateRunning), string(sandbox.StatePaused)},
		Limit:    store.MaxPageSize,
	}
	var errs []error
	for {
		sbs, next, err := r.cfg.Sandboxes.List(ctx, f)
		if err != nil {
			return n, fmt.Errorf("list hosted connector sandboxes: %w", err)
		}
		for _, sb := range sbs {
			if known[sb.ID] {
				continue
			}
			if err := r.cfg.Sandboxes.Kill(ctx, sb.ID, "mcp hosted connector left by an earlier daemon"); err != nil && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, fmt.Errorf("kill %s: %w", sb.ID, err))
				continue
			}
			n++
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
	return n, errors.Join(errs...)
}

// Sandbox returns the ID of the sandbox serving connectorID for
// principalID ("" for a connector's shared one), or "" if none runs now.
func (r *Runner) Sandbox(connectorID, principalID string) string {
	r.mu.Lock()
	in := r.insts[instKey{connectorID, principalID}]
	r.mu.Unlock()
	if in == nil {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sbID
}
