// Package daemon builds wardend's subsystems from its configuration, runs
// them, and shuts them down: the store, identities and the first admin key,
// the audit log, the backends from the registry (package backend; see
// backends.go), the sandbox manager and restart recovery, and the HTTP API
// on TCP and a unix socket. The subsystems are the fields of one daemon.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warden-sandbox/warden/internal/agents"
	"github.com/warden-sandbox/warden/internal/api"
	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/broker"
	"github.com/warden-sandbox/warden/internal/build"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/connguard"
	"github.com/warden-sandbox/warden/internal/e2b"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/llmgw"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/mcpgw/hosted"
	"github.com/warden-sandbox/warden/internal/memory"
	"github.com/warden-sandbox/warden/internal/monitor"
	"github.com/warden-sandbox/warden/internal/mw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/safefile"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
	"github.com/warden-sandbox/warden/internal/usage"
	"github.com/warden-sandbox/warden/internal/version"
	"github.com/warden-sandbox/warden/internal/volume"
)

// Paths under the state directory.
const (
	DBFile         = "warden.db"
	AdminKeyFile   = "admin.key"
	AuditKeyFile   = "audit.key"
	CheckpointFile = "audit.checkpoint"
	PresignKeyFile = "presign.key"
	E2BKeyFile     = "e2b.key" // derives the E2B envd access tokens
	TemplatesDir   = "templates"
)

// daemon holds wardend's subsystems, built in this order by Run.
type daemon struct {
	cfg config.Config
	log *slog.Logger

	st         store.Store
	alog       *audit.Logger
	audits     *govern.AuditLog // the doors' audit writer and reader, over alog
	authn      *auth.Authenticator
	presignKey []byte

	backends *backends
	tmpl     *template.Store
	vault    *secrets.Vault
	broker   *broker.Broker
	hooks    *secretHooks
	net      *network.Manager // nil: no sandbox networking
	mgr      *sandbox.Manager
	srv      *api.Server
	gov      *govern.Engine
	egress   *egressActors  // the actors of sandboxes' egress, for the governed path
	mcp      *mcpgw.Gateway // the MCP gateway (mcp.go)
	mw       *mw.Set        // the configured middleware (middleware.go); nil when none
	mwReg    *mw.Registry   // config-file and API-added middleware (middleware.go)
	llm      *llmgw.Gateway // the LLM gateway (llm.go)
	hosted   *hosted.Runner // its hosted connectors

	agents *agents.Service // hosted agents (agents.go)
	local  localRoute      // runs' route from their sandbox to wardend (agentroute.go)
	memory *memory.Service // agents' memory (memory.go)

	// mon is the Agent Monitor (monitor.go); nil when disabled.
	mon *monitor.Monitor

	vols  *volume.Manager   // persistent volumes (volumes.go); nil: unavailable
	snaps *snapshot.Service // filesystem snapshots (snapshots.go); nil: unavailable

	meter *usage.Meter // the sandbox usage meter (sandbox_usage.go)

	webhooks *webhooks // outgoing webhooks (webhook.go); nil: none
}

// Run runs wardend until ctx ends. ready, if not nil, is called with the
// addresses once the API is serving.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(tcp net.Addr, socket string)) error {
	d := &daemon{cfg: cfg, log: log}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	stopTracing, err := d.startTracing(ctx) // telemetry.go; flushes last
	if err != nil {
		return err
	}
	defer stopTracing()
	d.backends = &backends{cfg: cfg, log: log,
		params: backend.Params{RunDir: cfg.RunDir, StateDir: cfg.StateDir, AgentPath: cfg.AgentPath, Log: log}}
	// Preflights first: a host that cannot run the default backend is
	// refused before anything is written.
	if err := d.backends.preflight(); err != nil {
		return err
	}
	st, err := sqlite.Open(ctx, filepath.Join(cfg.StateDir, DBFile))
	if err != nil {
		return err
	}
	defer st.Close()
	d.st = st
	if err := d.openKeys(ctx); err != nil {
		return err
	}
	defer d.alog.Close()
	defer d.closeMonitor() // before the audit log closes
	// Signed audit checkpoints (usage.go).
	stopCheckpoints, err := d.startCheckpoints(ctx)
	if err != nil {
		return err
	}
	defer stopCheckpoints()
	defer d.startUsageRetention(ctx)() // auditretention.go
	if err := d.buildGovernance(ctx); err != nil {
		return err
	}
	defer d.gov.Close()
	defer d.closeMiddleware() // its worker and cgroup (middleware.go)
	if err := d.buildMemory(); err != nil {
		return err
	}
	if err := d.backends.build(ctx); err != nil {
		return err
	}
	defer d.backends.close()
	if err := d.buildUsageMeter(ctx); err != nil { // sandbox_usage.go
		return err
	}
	if err := d.buildManager(); err != nil {
		return err
	}
	d.buildVolumes()
	if err := d.prepareWebhooks(); err != nil { // webhook.go
		return err
	}
	if err := d.buildAPI(); err != nil {
		return err
	}
	if err := d.buildMCP(); err != nil {
		return err
	}
	defer d.stopMCP()
	if err := d.buildLLM(); err != nil {
		return err
	}
	stopWebhooks, err := d.buildWebhooks() // webhook.go
	if err != nil {
		return err
	}
	defer stopWebhooks()
	attached, lost, err := d.mgr.Recover(ctx)
	if err != nil {
		return err
	}
	defer d.startUsageMeter(ctx)() // sandbox_usage.go
	if attached+lost > 0 {
		log.Info("recovered sandboxes after restart", "reattached", attached, "lost", lost)
	}
	d.reconcileVolumes(ctx)
	for _, id := range backend.IDs() {
		if b, ok := d.backends.built[id]; ok {
			backend.CleanOrphans(ctx, b, log)
		}
	}
	return d.serve(ctx, ready)
}

// openKeys bootstraps the first admin key and opens the audit log and the
// presign key.
func (d *daemon) openKeys(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	keyPath, err := auth.Bootstrap(ctx, d.st, filepath.Join(cfg.StateDir, AdminKeyFile))
	if err != nil {
		return fmt.Errorf("bootstrap admin key: %w", err)
	}
	if keyPath != "" {
		log.Info("created the first admin API key; it is readable by root only", "path", keyPath,
			"use", "export WARDEN_API_KEY=$(sudo cat "+keyPath+")")
	}
	auditKey, err := audit.LoadOrCreateKey(filepath.Join(cfg.StateDir, AuditKeyFile))
	if err != nil {
		return err
	}
	if d.alog, err = audit.New(ctx, audit.Config{Store: d.st, Key: auditKey, CheckpointPath: filepath.Join(cfg.StateDir, CheckpointFile)}); err != nil {
		return err
	}
	if d.audits, err = govern.NewAuditLog(d.monitorTap(d.alog), d.st, log); err != nil {
		d.alog.Close()
		return err
	}
	if d.presignKey, err = loadOrCreateSecret(filepath.Join(cfg.StateDir, PresignKeyFile)); err != nil {
		d.alog.Close()
		return err
	}
	return nil
}

// buildManager builds the template store, the credential broker, sandbox
// networking and the sandbox manager with its hooks.
func (d *daemon) buildManager() error {
	cfg, log := d.cfg, d.log
	tmpl, err := template.OpenStore(filepath.Join(cfg.StateDir, TemplatesDir))
	if err != nil {
		return fmt.Errorf("open template store: %w", err)
	}
	d.tmpl = tmpl
	if b, err := tmpl.Base(); err == nil && b.Warning != "" {
		log.Warn(b.Warning)
	}
	// Brokered credentials: the secret store and the TLS broker that the
	// egress path hands granted connections to.
	if d.vault, err = secrets.Open(cfg.StateDir); err != nil {
		return fmt.Errorf("open secret store: %w", err)
	}
	revokeStaleGitGrants(d.vault, log) // gitgrants.go
	audits := d.audits
	// The egress path's actions (flows, secret uses) go through the
	// governed path (egress_govern.go).
	flowGov, useGov := d.egressGovernance()
	d.broker, err = broker.New(broker.Config{Credentials: d.vault, StateDir: filepath.Join(cfg.StateDir, "broker-ca"),
		Govern: useGov, LLM: llmEgress{d}, // model calls to known providers metered (llmegress.go)
		OnUse: func(u broker.UseEvent) {
			ev := govern.AuditEvent{Principal: "system", Name: "secret.use", Target: u.SandboxID, Outcome: govern.AuditSuccess,
				Detail: map[string]any{"grant": u.GrantID, "secret": u.SecretID, "version": u.Version,
					"host": u.Host, "method": u.Method, "path": u.Path}}
			if u.Govern != nil {
				ev.Governed = []govern.Decided{*u.Govern}
			}
			_ = audits.Write(context.Background(), ev) // a failure is logged by Write
		},
		OnMismatch: func(m broker.MismatchEvent) {
			auditNetwork(audits, "secret.mismatch", m.SandboxID, m.Host+" (sni "+m.SNI+")", m.Reason)
		},
	})
	if err != nil {
		return fmt.Errorf("credential broker: %w", err)
	}
	// The hooks reach the manager once it exists (below).
	d.hooks = &secretHooks{vault: d.vault, broker: d.broker, log: log}
	if !cfg.Network.Disabled {
		ncfg := network.Config{DNSUpstream: cfg.Network.DNSUpstream,
			TLSIntercept: d.hooks.intercept,
			TLSHandoff:   d.hooks.handoff,
			Local:        d.serveLocal,
			Govern:       flowGov,
			OnDeny:       func(sb, target, reason string) { auditNetwork(audits, "network.deny", sb, target, reason) },
			OnQuery: func(sb, name, qtype, decision string) {
				log.Debug("sandbox dns query", "sandbox", sb, "name", name, "type", qtype, "decision", decision)
			},
		}
		for _, c := range cfg.Network.AllowPrivate {
			ncfg.AllowPrivate = append(ncfg.AllowPrivate, netip.MustParsePrefix(c))
		}
		for _, c := range cfg.Network.Deny {
			ncfg.Deny = append(ncfg.Deny, netip.MustParsePrefix(c))
		}
		if d.net, err = network.New(ncfg); err != nil {
			log.Warn("sandbox networking unavailable: sandboxes get loopback only", "err", err)
			d.net = nil
		}
	}
	mcfg := sandbox.Config{DefaultTimeout: cfg.DefaultTimeout, MaxTimeout: cfg.MaxTimeout,
		MaxSandboxes: cfg.MaxSandboxes, PoolSize: cfg.PoolSize, PausedRetention: cfg.PausedRetention,
		Net:        d.net,
		OnEnd:      d.sandboxEnded,
		OnEvent:    func(id string, ev backend.Event) { d.srv.SandboxEvent(id, ev) },
		AfterStart: d.afterStart,
		Probe:      func(id string) bool { return d.backends.probe(context.Background(), id) },
		Usage:      d.usageHook(),
	}
	d.mgr = sandbox.New(mcfg, d.st, d.backends.built[cfg.Backend], tmpl, log)
	for _, id := range backend.IDs() {
		if b, ok := d.backends.built[id]; ok && id != cfg.Backend {
			d.mgr.AddBackend(b)
		}
	}
	d.hooks.mgr = d.mgr
	return nil
}

// sandboxEnded is the manager's OnEnd: the API's metrics and events, and
// the sandbox's credentials forgotten.
func (d *daemon) sandboxEnded(sb store.Sandbox) {
	d.srv.SandboxEnded(sb)
	d.broker.Forget(sb.ID)
	d.llmSandboxEnded(sb.ID) // llmegress.go
	d.vault.PurgeSandbox(sb.ID)
	d.egress.forget(sb.ID)
}

// afterStart is the manager's AfterStart: a new sandbox gets its
// credential grants.
func (d *daemon) afterStart(ctx context.Context, sb store.Sandbox) {
	if err := d.hooks.Apply(ctx, sb.ID, sb.Owner); err != nil {
		d.log.Warn("hand credential grants to a new sandbox", "sandbox", sb.ID, "err", err)
	}
}

// builder returns the template builder's backend: the default one if it
// can capture a writable layer, else the first registered one that can.
func (d *daemon) builderBackend() backend.Backend {
	if b := d.backends.built[d.cfg.Backend]; b != nil && b.Capabilities().CaptureUpper {
		return b
	}
	for _, id := range backend.IDs() {
		if b, ok := d.backends.built[id]; ok && b.Capabilities().CaptureUpper {
			return b
		}
	}
	return nil
}

// buildAPI builds the native API server and registers its collectors.
func (d *daemon) buildAPI() error {
	cfg := d.cfg
	publicURL := cfg.PublicURL
	if publicURL == "" && cfg.Listen != "" {
		publicURL = "http://" + cfg.Listen
	}
	// One Authenticator for both APIs: a key revoked through either is
	// refused by both at once (it caches key records briefly).
	d.authn = auth.New(d.st)
	if err := d.buildAgents(); err != nil {
		return err
	}
	d.wireMemoryRuns()
	images, err := imagePolicy(cfg)
	if err != nil {
		return err
	}
	var builder *build.Builder
	if bb := d.builderBackend(); bb != nil {
		builder = &build.Builder{Store: d.tmpl, Backend: bb, Net: d.net, Images: images, Actor: d.egress.build}
	} else {
		d.log.Warn("no backend here can capture a writable layer: template builds are unavailable")
	}
	d.srv, err = api.New(api.Config{
		Manager: d.mgr, Store: d.st, Auth: d.authn, Audit: d.audits, Logger: d.log,
		PresignKey: d.presignKey, PublicURL: publicURL, Version: version.Version,
		RateLimit: cfg.RateLimit, RateBurst: cfg.RateBurst,
		Templates: d.tmpl, Builder: builder, Images: images,
		PerSandboxLabels: cfg.Metrics.PerSandboxLabels, PreviewWebSocketsPerPort: cfg.Limits.PreviewWebSocketsPerPort, PreviewWebSocketsPerClient: cfg.Limits.PreviewWebSocketsPerClient,
		Secrets: d.vault, SecretHooks: d.hooks,
		PreviewDomain: cfg.PreviewDomain,
		Govern:        d.gov,
		MCP:           mcpHooks{d},
		LLM:           llmAdmin{d},
		Agents:        d.agents,
		Memory:        d.memory,
		Middleware:    d.mwReg,
		Monitor:       d.mon,
		Volumes:       d.vols,
		Snapshots:     d.buildSnapshots(),
		Webhooks:      d.webhookAdmin(), // webhook.go
	})
	if err != nil {
		return err
	}
	if d.net != nil {
		if err := d.srv.RegisterCollector(d.net); err != nil {
			return err
		}
	}
	// Operation durations, OOM kills, the warm pool; per-sandbox usage.
	for _, c := range d.mgr.Collectors() {
		if err := d.srv.RegisterCollector(c); err != nil {
			return err
		}
	}
	return nil
}

// serve runs the listeners until ctx ends or one fails, then shuts down.
func (d *daemon) serve(ctx context.Context, ready func(tcp net.Addr, socket string)) error {
	cfg, log, mgr, srv, authn := d.cfg, d.log, d.mgr, d.srv, d.authn
	var err error
	// Connection caps shared by the TCP listeners, and the minimum rate of
	// request bodies on every listener (see internal/connguard).
	conns := connguard.NewLimiter(cfg.Limits.MaxConns, cfg.Limits.MaxConnsPerIP, log)
	if err := srv.RegisterCollector(conns); err != nil {
		return err
	}
	bodies := connguard.BodyLimits{Timeout: cfg.Limits.BodyTimeout, MinRate: cfg.Limits.BodyMinRate, StreamTimeout: cfg.Limits.StreamBodyTimeout}

	if cfg.DebugListen != "" {
		if err := serveDebug(ctx, cfg.DebugListen, log); err != nil {
			return err
		}
	}
	hs := &http.Server{Handler: bodies.Handler(traceMain(d.withLLM(d.withMCP(srv.Handler())))), ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	var lns []net.Listener
	var tcpAddr net.Addr
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		lns = append(lns, conns.Listen(ln, connguard.APIReject))
		tcpAddr = ln.Addr()
	}
	if cfg.Socket != "" {
		ln, err := listenUnix(cfg.Socket)
		if err == nil {
			if err = socketAccess(cfg.Socket, cfg.SocketGroup, log); err != nil {
				ln.Close()
			}
		}
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return err
		}
		lns = append(lns, ln)
	}
	var e2bSrv *http.Server
	var e2bLn net.Listener
	if cfg.E2BListen != "" {
		tokenKey, err := loadOrCreateSecret(filepath.Join(cfg.StateDir, E2BKeyFile))
		if err == nil {
			var es *e2b.Server
			es, err = e2b.New(e2b.Config{Manager: mgr, Auth: authn, Audit: d.audits, Logger: log.With("api", "e2b"),
				TokenKey: tokenKey, Domain: cfg.E2BDomain, Govern: d.gov, Snapshots: d.snaps})
			if err == nil {
				e2bLn, err = net.Listen("tcp", cfg.E2BListen)
				if err != nil && cfg.E2BListen == config.DefaultE2BListen && errors.Is(err, syscall.EADDRINUSE) {
					// The default port is a popular one (dev servers): a
					// fresh wardend starts without the E2B API rather
					// than not at all, and says how to move it.
					log.Warn("the E2B-compatible API is off: its default address is in use; move it with --e2b-listen ADDR (or turn it off with --e2b-listen \"\")",
						"addr", cfg.E2BListen, "err", err)
					err = nil
				} else if err != nil {
					err = fmt.Errorf("listen on %s (e2b): %w", cfg.E2BListen, err)
				} else {
					e2bLn = conns.Listen(e2bLn, connguard.E2BReject)
				}
			}
			if err == nil && e2bLn != nil {
				e2bSrv = &http.Server{Handler: bodies.Handler(traceE2B(es.Handler())), ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout,
					MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
			}
		}
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return err
		}
	}
	// The optional metrics listener: /metrics without authentication, for
	// an operator who keeps the address private.
	var metricsSrv *http.Server
	var metricsLn net.Listener
	if cfg.Metrics.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			if e2bLn != nil {
				e2bLn.Close()
			}
			return fmt.Errorf("listen on %s (metrics): %w", cfg.Metrics.Listen, err)
		}
		metricsLn = conns.Listen(ln, connguard.APIReject)
		metricsSrv = &http.Server{Handler: bodies.Handler(srv.MetricsHandler()), ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout,
			MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go mgr.Run(rctx)
	d.startMCP(rctx)
	d.startAgents(rctx)
	mgr.StartPool(rctx)
	d.backends.watch(rctx, mgr)

	errc := make(chan error, len(lns)+2)
	var wg sync.WaitGroup
	if e2bSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e2bSrv.Serve(e2bLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		e2bURL := "http://" + e2bLn.Addr().String()
		log.Info("serving the E2B-compatible API (E2B's SDKs: set these, with a Warden API key as E2B_API_KEY)", "tcp", e2bLn.Addr().String(),
			"E2B_API_URL", e2bURL, "E2B_SANDBOX_URL", e2bURL)
	}
	if metricsSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := metricsSrv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		log.Warn("serving /metrics without authentication", "tcp", metricsLn.Addr().String())
	}
	for _, ln := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	log.Info("wardend serving", "version", version.Version, "tcp", cfg.Listen, "socket", cfg.Socket, "backend", cfg.Backend, "backends_ready", strings.Join(mgr.Backends(), ","), "state_dir", cfg.StateDir)
	if ready != nil {
		ready(tcpAddr, cfg.Socket)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("wardend shutting down; sandboxes keep running and are re-attached at the next start")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		hs.Close()
	}
	if e2bSrv != nil {
		if serr := e2bSrv.Shutdown(sctx); serr != nil {
			e2bSrv.Close()
		}
	}
	if metricsSrv != nil {
		if serr := metricsSrv.Shutdown(sctx); serr != nil {
			metricsSrv.Close()
		}
	}
	wg.Wait()
	stop()
	d.stopAgents()
	mgr.Shutdown()
	if cfg.Socket != "" {
		os.Remove(cfg.Socket)
	}
	return err
}

// listenUnix listens on a root-only unix socket, replacing a stale one.
// socketAccess then opens it to the socket group.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("another wardend is serving on %s", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Root-only until socketAccess opens it to its group.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// loadOrCreateSecret reads a 32-byte hex secret from a root-only file,
// creating it on first use, with the checks of every key file (package
// safefile): a file that group or others can access, that another user
// owns or that is not a regular file is refused.
func loadOrCreateSecret(path string) ([]byte, error) {
	key, err := safefile.LoadOrCreateKey(path, 32)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", filepath.Base(path), err)
	}
	return key, nil
}

// serveDebug serves net/http/pprof on addr until ctx ends.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug listener %s: %w", addr, err)
	}
	// Contention profiles too (/debug/pprof/block, /debug/pprof/mutex).
	runtime.SetBlockProfileRate(10_000) // one event per 10 µs blocked
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ds := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		ds.Close()
	}()
	go ds.Serve(ln)
	log.Warn("profiler listening (no authentication)", "addr", ln.Addr().String())
	return nil
}

// auditNetwork records a network decision in the audit log under the
// principal "system" (the sandbox's own traffic, not an API call).
func auditNetwork(audits *govern.AuditLog, action, sandboxID, target, reason string) {
	// A failure is logged by Write.
	_ = audits.Write(context.Background(), govern.AuditEvent{Principal: "system", Name: action, Target: sandboxID,
		Outcome: govern.AuditDenied, Detail: map[string]any{"target": target, "reason": reason}})
}
