// Package agent is warden-agent: the process that runs inside every sandbox,
// whatever the backend, and serves exec and files to the host over one byte
// stream. It speaks HTTP/2 cleartext (and HTTP/1.1) carrying Connect-RPC
// services wire-compatible with E2B's envd (process.Process,
// filesystem.Filesystem) plus plain HTTP routes:
//
//	GET  /health           204 when serving
//	GET  /envs             the sandbox-wide environment as a JSON object
//	GET  /files?path=      read a file (Range supported)
//	POST /files?path=      write a file atomically (octet-stream or multipart)
//	GET  /tar?path=        a directory as a tar stream
//	POST /tar?path=        extract a tar stream safely under path
//	GET  /port?port=       204 when a TCP port inside the sandbox accepts connections (ready checks)
//	POST /port/connect?port=  a byte stream to a TCP port on the sandbox's loopback (HTTP/2 only)
//	POST /execute          run code in an interpreter context (NDJSON events)
//	GET|POST /contexts     list or create interpreter contexts
//	POST /contexts/{id}/restart, POST /contexts/{id}/interrupt, DELETE /contexts/{id}
//
// The code-interpreter routes are E2B's (see package interp).
//
// The acting user comes from "Authorization: Basic base64(user:)", default
// Config.DefaultUser.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
	"github.com/warden-sandbox/warden/internal/agent/files"
	"github.com/warden-sandbox/warden/internal/agent/interp"
	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/agent/sudo"
	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
)

// Config is what the agent knows about its sandbox. It lives in package
// agentcfg, which the daemon's backends import without linking the agent.
type Config = agentcfg.Config

// Agent holds the services of one agent.
type Agent struct {
	cfg   Config
	mu    sync.RWMutex
	env   map[string]string
	procs *process.Service
	files *files.Service
	code  *interp.Service
	own   ownPorts // TCP ports the agent serves on, never forwarded to
	// stopSudo closes the sudo socket (nil when the sandbox has no sudo).
	stopSudo context.CancelFunc
}

// New builds an agent.
func New(cfg Config) *Agent {
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "user"
	}
	a := &Agent{cfg: cfg, env: map[string]string{}}
	for k, v := range cfg.Env {
		a.env[k] = v
	}
	a.procs = process.New(process.Config{
		DefaultUser:    cfg.DefaultUser,
		DefaultWorkdir: cfg.DefaultWorkdir,
		Env:            a.Env,
	})
	a.files = files.New(files.Config{
		DefaultUser:    cfg.DefaultUser,
		DefaultWorkdir: cfg.DefaultWorkdir,
		DiskBytes:      cfg.DiskBytes,
	})
	a.code = interp.New(interp.Config{DefaultUser: cfg.DefaultUser, Procs: a.procs})
	if os.Getpid() == 1 {
		// A sandbox's agent (its init): the code interpreter also listens
		// on the sandbox's loopback port 49999, as in E2B's template.
		go a.code.ServeLocal(context.Background(), interp.LocalAddr)
	}
	if cfg.Sudo {
		a.startSudo()
	}
	return a
}

// startSudo serves the sudo program (see package sudo), which the backend
// has bound read-only at sudo.ShimPath: the agent binary itself, never a
// copy in the sandbox's writable layer. A failure leaves the sandbox
// without sudo, logged: `sudo` then says so.
func (a *Agent) startSudo() {
	ctx, cancel := context.WithCancel(context.Background())
	if err := (&sudo.Server{Procs: a.procs}).Listen(ctx, sudo.SocketPath); err != nil {
		cancel()
		slog.Warn("sudo unavailable", "err", err)
		return
	}
	a.stopSudo = cancel
}

// Env returns a copy of the sandbox-wide environment.
func (a *Agent) Env() map[string]string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	m := make(map[string]string, len(a.env))
	for k, v := range a.env {
		m[k] = v
	}
	return m
}

// Handler returns the agent's HTTP handler.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(a.procs))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(a.files))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /envs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.Env())
	})
	mux.HandleFunc("POST /init", a.serveInit)
	mux.HandleFunc("GET /port", servePort)
	mux.HandleFunc("POST "+PortConnectPath, a.servePortConnect)
	mux.HandleFunc("/files", a.files.ServeFiles)
	mux.HandleFunc("/tar", a.files.ServeTar)
	a.code.Register(mux)
	return mux
}

// servePort answers whether a TCP port on the sandbox's loopback accepts
// connections, for template ready checks: 204 if so, 503 with the error if
// not, 400 for a bad port.
func servePort(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		http.Error(w, "port must be 1 to 65535", http.StatusBadRequest)
		return
	}
	var last error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		last = err
	}
	http.Error(w, last.Error(), http.StatusServiceUnavailable)
}

// initRequest is the body of POST /init (field names as E2B's envd).
type initRequest struct {
	EnvVars map[string]string `json:"envVars"`
}

// serveInit sets the sandbox-wide environment when the daemon hands a
// pre-started (pooled) sandbox to its owner: processes started afterwards
// see it. Variables are added to those the agent started with.
func (a *Agent) serveInit(w http.ResponseWriter, r *http.Request) {
	var req initRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"code": 400, "message": "init: " + err.Error()})
		return
	}
	a.mu.Lock()
	for k, v := range req.EnvVars {
		a.env[k] = v
	}
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Close ends every process the agent started.
func (a *Agent) Close() {
	if a.stopSudo != nil {
		a.stopSudo()
	}
	a.code.Close()
	a.procs.Close()
}

// Serve serves the agent on ln (HTTP/1.1 and HTTP/2 without TLS) until ctx ends.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	srv := a.Server(ln, a.Handler())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Server returns the HTTP server that Serve runs on ln, with handler h (the
// agent's Handler, possibly wrapped): the gVisor init serves the agent
// itself, so that it can close every host-backed connection before a
// checkpoint and listen again after a restore.
func (a *Agent) Server(ln net.Listener, h http.Handler) *http.Server {
	a.own.add(ln.Addr())
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protos,
		ReadHeaderTimeout: 10 * time.Second,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 1000},
	}
}
