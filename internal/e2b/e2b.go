// Package e2b serves E2B's wire protocol on top of Warden so that agents
// written for the E2B SDKs can use a self-hosted Warden by setting
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (a Warden API key).
//
// One http.Handler serves both halves of E2B's protocol on one listener:
//
//   - the control plane (POST /sandboxes, GET /v2/sandboxes, ...), which
//     authenticates X-API-Key with internal/auth exactly like the main API,
//     checks scopes and ownership and audits every call;
//   - sandbox traffic: requests carrying E2b-Sandbox-Id and E2b-Sandbox-Port
//     (49983 envd, 49999 code interpreter), and header-less /files requests
//     carrying a v1_ signature, are reverse-proxied to the sandbox's
//     warden-agent, which speaks envd's protocol natively.
//
// Each sandbox's envd access token is derived, not stored:
// HMAC-SHA256(TokenKey, "envd:"+sandboxID+"\x00"+keyID), where keyID is the
// API key the token is bound to (the key that created the sandbox, or the
// one that reconnected after it was revoked; store.Sandbox.EnvdKey). The
// token works only while that key is valid: revoking the key cuts every
// envd token and signed URL derived through it. TokenKey lives in the
// daemon's state directory, so tokens survive a daemon restart.
package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
)

// EnvdVersion is the envd version reported to SDKs. warden-agent implements
// every feature the 2.51 SDK gates up to 0.6.4 (metadata xattrs,
// includeEntry and allowNetworkMounts in watches, octet-stream and gzip
// uploads, closeStdin, server-side default user).
const EnvdVersion = "0.6.4"

// Ports of the services inside a sandbox that the SDKs know by number.
const (
	PortEnvd = 49983
	PortCode = 49999
)

// Config configures a Server.
type Config struct {
	Manager *sandbox.Manager
	Auth    *auth.Authenticator
	// Audit writes each call's audit event (the governed path's last
	// step; govern.NewAuditLog over the audit logger).
	Audit  *govern.AuditLog
	Logger *slog.Logger
	// TokenKey derives the per-sandbox envd access tokens (at least 16 bytes).
	TokenKey []byte
	// Domain is returned as "domain" in create/connect responses (feeds
	// only the SDK's getHost()); "" returns null. When set, requests whose
	// Host is {port}-{sandboxID}.{Domain} are routed like header-routed ones.
	Domain string
	// Govern decides every action (docs/governance.md); nil lets every
	// action through undecided (tests that do not govern).
	Govern *govern.Engine
	// Snapshots keeps filesystem snapshots (snapshots.go); nil: the
	// snapshot routes answer 503 and templateID names no snapshot.
	Snapshots *snapshot.Service
}

// Server is the E2B-compatible handler.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	// The signed-URL lookup (see findBySignature).
	scans       *rate.Limiter
	signed      sync.Map // signature -> sandbox id
	signedCount atomic.Int64

	cpu cpuSamples // last CPU reading per sandbox, for cpuUsedPct

	public publicSandboxes // sandboxes whose user ports need no token
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Manager == nil || cfg.Auth == nil || cfg.Audit == nil {
		return nil, errors.New("e2b: Manager, Auth and Audit are required")
	}
	if len(cfg.TokenKey) < 16 {
		return nil, errors.New("e2b: TokenKey must be at least 16 bytes")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, scans: rate.NewLimiter(signedScanRate, signedScanBurst)}
	s.mux = s.routes()
	return s, nil
}

// EnvdToken returns the envd access token of a sandbox: derived from its ID
// and the API key it is bound to (sb.EnvdKey), so binding another key
// changes it. A sandbox bound to no key has none (""), and the proxy
// accepts a token only while its key is valid (see proxy).
func (s *Server) EnvdToken(sb store.Sandbox) string {
	if sb.EnvdKey == "" {
		return ""
	}
	return s.derive("envd:", sb.ID+"\x00"+sb.EnvdKey)
}

// TrafficToken returns the token guarding the code-interpreter port (the
// SDK sends it as E2B-Traffic-Access-Token on every port-49999 call), bound
// like EnvdToken.
func (s *Server) TrafficToken(sb store.Sandbox) string {
	if sb.EnvdKey == "" {
		return ""
	}
	return s.derive("traffic:", sb.ID+"\x00"+sb.EnvdKey)
}

func (s *Server) derive(label, id string) string {
	m := hmac.New(sha256.New, s.cfg.TokenKey)
	m.Write([]byte(label + id))
	return hex.EncodeToString(m.Sum(nil))
}

// Handler returns the handler: sandbox traffic when the request names a
// sandbox (routing headers, a routed Host, or a signed /files URL), the
// control plane otherwise.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", newRequestID())
		if s.isSandboxTraffic(r) {
			s.proxy(w, r)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// apiError is an error with E2B's body {"code","message"}.
type apiError struct {
	status  int
	message string
	denied  bool // audit outcome "denied"
	cause   error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %v", e.status, e.message, e.cause)
	}
	return fmt.Sprintf("%d %s", e.status, e.message)
}

func errf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"code":500,"message":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"code": e.status, "message": e.message})
}

func newRequestID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "req-" + hex.EncodeToString(b)
}

// appendAudit hands one call's audit event, with the actions decided for
// it (the decisive one first), to the governed path's audit log, which
// writes it with their records; failures are logged there.
func (s *Server) appendAudit(ctx context.Context, reqID, principal, action, target, outcome string, detail map[string]any, governed []govern.Decided) {
	s.cfg.Audit.Write(ctx, govern.AuditEvent{
		RequestID: reqID, Principal: principal, Name: action, Target: target, Outcome: outcome,
		Detail: detail, Governed: governed,
	})
}
