// Package daemon builds wardend's subsystems from its configuration, runs
// them, and shuts them down: the store, identities and the first admin key,
// the audit log, the backend and its preflight, the sandbox manager and
// restart recovery, and the HTTP API on TCP and a unix socket.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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

	"github.com/warden-sandbox/warden/internal/api"
	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor"
	"github.com/warden-sandbox/warden/internal/backend/native"
	"github.com/warden-sandbox/warden/internal/broker"
	"github.com/warden-sandbox/warden/internal/build"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/connguard"
	"github.com/warden-sandbox/warden/internal/e2b"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
	"github.com/warden-sandbox/warden/internal/version"
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

// Run runs wardend until ctx ends. ready, if not nil, is called with the
// addresses once the API is serving.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(tcp net.Addr, socket string)) error {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	if err := native.Preflight(); err != nil {
		return fmt.Errorf("backend native cannot run here: %w", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(cfg.StateDir, DBFile))
	if err != nil {
		return err
	}
	defer st.Close()

	keyPath, err := auth.Bootstrap(ctx, st, filepath.Join(cfg.StateDir, AdminKeyFile))
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
	alog, err := audit.New(ctx, audit.Config{Store: st, Key: auditKey, CheckpointPath: filepath.Join(cfg.StateDir, CheckpointFile)})
	if err != nil {
		return err
	}
	defer alog.Close()
	presignKey, err := loadOrCreateSecret(filepath.Join(cfg.StateDir, PresignKeyFile))
	if err != nil {
		return err
	}

	nb, err := native.New(native.Config{RunDir: filepath.Join(cfg.RunDir, "native"), AgentPath: cfg.AgentPath, Landlock: cfg.Landlock,
		DiskDir: filepath.Join(cfg.StateDir, "disks", "native")})
	if err != nil {
		return err
	}
	if medium, why := nb.WritableLayer(); medium != "disk" {
		log.Error("SANDBOX DISK IS MEMORY: native sandboxes' writable layers cannot go on disk here and use a tmpfs charged to their memory limit (a large upload can OOM-kill a sandbox)", "reason", why)
	}
	// gVisor when runsc is installed; the default backend only if asked.
	// Without runsc the daemon serves native sandboxes and brings gvisor up
	// when runsc appears (see gvisorProber), without a restart.
	var gb *gvisor.Backend
	var gprobe *gvisorProber
	if !cfg.GVisor.Disabled {
		gprobe = &gvisorProber{cfg: cfg, log: log}
		if gb, err = gprobe.probe(ctx); err != nil {
			if cfg.Backend == gvisor.ID {
				return fmt.Errorf("backend gvisor cannot run here: %w", err)
			}
			log.Warn("the gvisor backend is unavailable for now; sandboxes use native isolation until runsc is installed (checked again every "+gvisorRetry.String()+" and at each gvisor create)", "reason", err)
		}
	}
	var b backend.Backend = nb
	if cfg.Backend == gvisor.ID {
		b = gb
	}
	tmpl, err := template.OpenStore(filepath.Join(cfg.StateDir, TemplatesDir))
	if err != nil {
		return fmt.Errorf("open template store: %w", err)
	}
	if b, err := tmpl.Base(); err == nil && b.Warning != "" {
		log.Warn(b.Warning)
	}
	mgr := sandbox.New(sandbox.Config{DefaultTimeout: cfg.DefaultTimeout, MaxTimeout: cfg.MaxTimeout,
		MaxSandboxes: cfg.MaxSandboxes, PoolSize: cfg.PoolSize}, st, b, tmpl, log)
	mgr.AddBackend(nb)
	if gb != nil {
		mgr.AddBackend(gb)
	}
	// Brokered credentials: the secret store and the TLS broker that the
	// egress path hands granted connections to.
	vault, err := secrets.Open(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("open secret store: %w", err)
	}
	brk, err := broker.New(broker.Config{Credentials: vault, StateDir: filepath.Join(cfg.StateDir, "broker-ca"),
		OnUse: func(u broker.UseEvent) {
			detail, _ := json.Marshal(map[string]any{"grant": u.GrantID, "secret": u.SecretID, "version": u.Version,
				"host": u.Host, "method": u.Method, "path": u.Path})
			if _, err := alog.Append(context.Background(), audit.Event{PrincipalID: "system", Action: "secret.use",
				Target: u.SandboxID, Outcome: audit.OutcomeSuccess, Detail: detail}); err != nil {
				log.Error("append audit event", "action", "secret.use", "err", err)
			}
		},
		OnMismatch: func(m broker.MismatchEvent) {
			auditNetwork(alog, log, "secret.mismatch", m.SandboxID, m.Host+" (sni "+m.SNI+")", m.Reason)
		},
	})
	if err != nil {
		return fmt.Errorf("credential broker: %w", err)
	}
	hooks := &secretHooks{mgr: mgr, vault: vault, broker: brk, log: log}
	var netm *network.Manager
	if !cfg.Network.Disabled {
		ncfg := network.Config{DNSUpstream: cfg.Network.DNSUpstream,
			TLSIntercept: hooks.intercept,
			TLSHandoff:   hooks.handoff,
			OnDeny:       func(sb, target, reason string) { auditNetwork(alog, log, "network.deny", sb, target, reason) },
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
		if netm, err = network.New(ncfg); err != nil {
			log.Warn("sandbox networking unavailable: sandboxes get loopback only", "err", err)
			netm = nil
		} else {
			mgr.Net = netm
		}
	}
	publicURL := cfg.PublicURL
	if publicURL == "" && cfg.Listen != "" {
		publicURL = "http://" + cfg.Listen
	}
	// One Authenticator for both APIs: a key revoked through either is
	// refused by both at once (it caches key records briefly).
	authn := auth.New(st)
	images, err := imagePolicy(cfg)
	if err != nil {
		return err
	}
	srv, err := api.New(api.Config{
		Manager: mgr, Store: st, Auth: authn, Audit: alog, Logger: log,
		PresignKey: presignKey, PublicURL: publicURL, Version: version.Version,
		RateLimit: cfg.RateLimit, RateBurst: cfg.RateBurst,
		Templates: tmpl, Builder: &build.Builder{Store: tmpl, Backend: nb, Net: netm, Images: images}, Images: images,
		PerSandboxLabels: cfg.Metrics.PerSandboxLabels, PreviewWebSocketsPerPort: cfg.Limits.PreviewWebSocketsPerPort, PreviewWebSocketsPerClient: cfg.Limits.PreviewWebSocketsPerClient,
		Secrets: vault, SecretHooks: hooks,
		PreviewDomain: cfg.PreviewDomain,
	})
	if err != nil {
		return err
	}
	if netm != nil {
		if err := srv.RegisterCollector(netm); err != nil {
			return err
		}
	}
	// Connection caps shared by the TCP listeners, and the minimum rate of
	// request bodies on every listener (see internal/connguard).
	conns := connguard.NewLimiter(cfg.Limits.MaxConns, cfg.Limits.MaxConnsPerIP, log)
	if err := srv.RegisterCollector(conns); err != nil {
		return err
	}
	bodies := connguard.BodyLimits{Timeout: cfg.Limits.BodyTimeout, MinRate: cfg.Limits.BodyMinRate, StreamTimeout: cfg.Limits.StreamBodyTimeout}
	// Operation durations, OOM kills, the warm pool; per-sandbox usage.
	for _, c := range mgr.Collectors() {
		if err := srv.RegisterCollector(c); err != nil {
			return err
		}
	}
	mgr.OnEnd = func(sb store.Sandbox) {
		srv.SandboxEnded(sb)
		brk.Forget(sb.ID)
		vault.PurgeSandbox(sb.ID)
	}
	mgr.AfterStart = func(ctx context.Context, sb store.Sandbox) {
		if err := hooks.Apply(ctx, sb.ID, sb.Owner); err != nil {
			log.Warn("hand credential grants to a new sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	mgr.OnEvent = srv.SandboxEvent

	attached, lost, err := mgr.Recover(ctx)
	if err != nil {
		return err
	}
	if attached+lost > 0 {
		log.Info("recovered sandboxes after restart", "reattached", attached, "lost", lost)
	}
	cleanOrphans(ctx, nativeOrphans{nb}, log)
	nb.PurgeDisks()
	if gb != nil {
		cleanOrphans(ctx, gb, log)
		if err := gb.PurgeDisks(); err != nil {
			log.Warn("remove leftover gvisor disk images", "err", err)
		}
		if err := gb.PurgeSnapshots(); err != nil { // forks a crash interrupted
			log.Warn("remove leftover fork snapshots", "err", err)
		}
	}

	if cfg.DebugListen != "" {
		if err := serveDebug(ctx, cfg.DebugListen, log); err != nil {
			return err
		}
	}
	hs := &http.Server{Handler: bodies.Handler(srv.Handler()), ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: 64 << 10,
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
			es, err = e2b.New(e2b.Config{Manager: mgr, Auth: authn, Audit: alog, Logger: log.With("api", "e2b"),
				TokenKey: tokenKey, MaxTimeout: cfg.MaxTimeout, Domain: cfg.E2BDomain})
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
				e2bSrv = &http.Server{Handler: bodies.Handler(es.Handler()), ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout,
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
	mgr.StartPool(rctx)
	if gprobe != nil {
		gprobe.attach(rctx, mgr)
	}

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
	log.Info("wardend serving", "version", version.Version, "tcp", cfg.Listen, "socket", cfg.Socket, "backend", b.ID(), "backends_ready", strings.Join(mgr.Backends(), ","), "state_dir", cfg.StateDir)
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

// orphanCleaner is what cleanOrphans needs of a backend.
type orphanCleaner interface {
	backend.Backend
	Orphans() ([]string, error)
	ReadHandle(id string) (backend.Handle, error)
	Purge(ctx context.Context, id string) error
}

// nativeOrphans adapts the native backend's Purge.
type nativeOrphans struct{ *native.Backend }

func (n nativeOrphans) Purge(_ context.Context, id string) error {
	n.Backend.Purge(id)
	return nil
}

// cleanOrphans frees sandboxes the backend still has on disk but no store
// record owns (a crash between backend create and the store write).
func cleanOrphans(ctx context.Context, b orphanCleaner, log *slog.Logger) {
	ids, err := b.Orphans()
	if err != nil {
		log.Warn("look for orphaned sandboxes", "backend", b.ID(), "err", err)
		return
	}
	for _, id := range ids {
		h, err := b.ReadHandle(id)
		if err == nil && b.Recover(ctx, h) == nil {
			b.Delete(ctx, h)
		} else if err := b.Purge(ctx, id); err != nil {
			log.Warn("remove orphaned sandbox", "backend", b.ID(), "sandbox", id, "err", err)
			continue
		}
		log.Info("removed orphaned sandbox", "backend", b.ID(), "sandbox", id)
	}
}

// loadOrCreateSecret reads a 32-byte hex secret from a root-only file,
// creating it on first use.
func loadOrCreateSecret(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err == nil {
		key, err := hex.DecodeString(strings.TrimSpace(string(raw)))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("secret %s is not 32 hex-encoded bytes", path)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read secret: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate secret: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create secret: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return nil, fmt.Errorf("write secret: %w", err)
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
func auditNetwork(alog *audit.Logger, log *slog.Logger, action, sandboxID, target, reason string) {
	detail, _ := json.Marshal(map[string]string{"target": target, "reason": reason})
	if _, err := alog.Append(context.Background(), audit.Event{
		PrincipalID: "system", Action: action, Target: sandboxID, Outcome: audit.OutcomeDenied, Detail: detail,
	}); err != nil {
		log.Error("append audit event", "action", action, "sandbox", sandboxID, "err", err)
	}
}
