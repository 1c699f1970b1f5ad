// Package mcpgw is Warden's MCP gateway (docs/mcp.md): it serves virtual
// MCP servers, each a named bundle of tools from upstream MCP servers
// (connectors), at /mcp/v/{server} on the API listener. A client (an
// agent, Claude Desktop, Cursor, a go-sdk client) authenticates with a
// Warden API key holding mcp:use and a grant of the server; it sees only
// the server's allowed tools whose definitions an admin approved
// (pinning), and every tools/call is an mcp.call action on the governed
// path (internal/govern), audited, with the connector's credential set
// by the gateway and never the client's.
package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// ScopeUse is the scope a key needs to use the virtual servers granted to
// its principal.
const ScopeUse = auth.Scope("mcp:use")

// PathPrefix is where virtual servers are served: PathPrefix + "{server}".
const PathPrefix = "/mcp/v/"

// Authenticator checks a request's Authorization header
// (*auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Identity, error)
}

// Secrets reads a secret's current value (*secrets.Vault).
type Secrets interface {
	Current(id string) ([]byte, int, error)
}

// HostedRunner runs hosted connectors (internal/mcpgw/hosted): the
// transport to a connector's stdio server inside its sandbox, started
// (or restarted) as needed.
type HostedRunner interface {
	Transport(ctx context.Context, connectorID string, spec json.RawMessage, principalID string) (mcp.Transport, error)
}

// Config configures a Gateway.
type Config struct {
	Store store.MCPStore
	Auth  Authenticator
	// Govern decides each tools/call (nil: every call is allowed, as with
	// an engine without policies).
	Govern *govern.Engine
	// Audit writes the gateway's audit events: the governed path's
	// AuditLog (nil: none are written).
	Audit *govern.AuditLog
	// Secrets holds connector credentials (nil: connectors get none).
	Secrets Secrets
	// HTTPClient returns the client for remote connectors: it must refuse
	// loopback, link-local, private and the host's own addresses unless
	// an admin allowed them (the safe dialer). Nil: remote connectors are
	// unavailable.
	HTTPClient func() *http.Client
	// Hosted runs hosted connectors (nil: unavailable).
	Hosted HostedRunner
	// API is the native API's handler: the builtin connector's tools call
	// it in process as the calling principal, so they get the API's
	// scopes, ownership checks, governance and audit (nil: builtin
	// unavailable).
	API http.Handler
	// Memory serves the builtin connector's memory tools, each on the
	// calling agent's own memory (internal/memory; nil: unavailable).
	Memory MemoryTools
	// AllowedOrigins are browser origins (scheme://host[:port]) allowed
	// besides the request's own host and PublicURL's.
	AllowedOrigins []string
	PublicURL      string
	// CatalogTTL is how long an upstream's tool list is used before it
	// is read again (default 10 minutes; list_changed reads it at once).
	CatalogTTL time.Duration
	// SyncInterval is how often a virtual server re-reads its spec, grants
	// of tools and pins (default 2 s; Invalidate makes it at once).
	SyncInterval time.Duration
	// MaxResultBytes bounds a tool result (default 4 MiB).
	MaxResultBytes int
	// PostResult, when set, runs after Govern's screen of a tool result
	// (the middleware post hooks, mw.Set.PostJSON): out is the result to
	// forward (result itself when unchanged); blocked refuses it with msg.
	PostResult func(ctx context.Context, a *govern.Action, result []byte) (out []byte, blocked bool, msg string)
	// TokenKey (32 bytes or more) signs the audience-bound tokens
	// TokenPath issues to MCP clients, and KeyIdentity checks the key a
	// token was issued for on each use (clientauth.go). Either unset: no
	// tokens; API keys only.
	TokenKey    []byte
	KeyIdentity KeyIdentity
	Log         *slog.Logger
	Now         func() time.Time
}

// Gateway serves virtual MCP servers. Safe for concurrent use.
type Gateway struct {
	cfg       Config
	log       *slog.Logger
	stateful  *mcp.StreamableHTTPHandler
	stateless *mcp.StreamableHTTPHandler
	bearer    func(http.Handler) http.Handler
	gen       atomic.Uint64 // bumped by Invalidate and upstream list changes

	mu       sync.Mutex
	vservers map[string]*vserver         // server "\x00" principal
	catalogs map[string]*catalog         // connector "\x00" credential key
	sessions map[string]*upstreamSession // connector "\x00" credential key
	noticed  map[string]bool             // pins whose pending state was audited
	progress map[string]*progressRoute   // gateway progress token -> client's
	closed   bool
	nextTok  atomic.Uint64

	oauthOnce sync.Once
	oa        *oauthState // OAuth flows and refresh locks (oauth.go)
	hot       hotCache    // the hot path's store reads (hotcache.go)
	relays    relayState  // client sessions' own upstream sessions (relay.go)
}

// New returns a gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Store == nil || cfg.Auth == nil {
		return nil, errors.New("mcp gateway: a store and an authenticator are required")
	}
	if cfg.CatalogTTL <= 0 {
		cfg.CatalogTTL = 10 * time.Minute
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 2 * time.Second
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 4 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gateway{cfg: cfg, log: cfg.Log, vservers: map[string]*vserver{}, catalogs: map[string]*catalog{},
		sessions: map[string]*upstreamSession{}, noticed: map[string]bool{}, progress: map[string]*progressRoute{}}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	getServer := func(r *http.Request) *mcp.Server {
		if c := callerFrom(r.Context()); c != nil {
			return c.vs.srv
		}
		return nil
	}
	// Both eras of streamable HTTP: sessions (initialize, Mcp-Session-Id,
	// up to 2025-11-25) and the stateless protocol (2026-07-28 on).
	// Sessions close after an hour without requests.
	g.stateful = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		SessionTimeout: time.Hour, Logger: g.log, MaxRequestBodyBytes: 4 << 20})
	g.stateless = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, Logger: g.log, MaxRequestBodyBytes: 4 << 20, PropagateRequestCancellation: true})
	// The door authenticated the caller already; this hands the go-sdk the
	// principal, which pins each session to it (another principal's
	// Mcp-Session-Id is refused).
	g.bearer = mcpauth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*mcpauth.TokenInfo, error) {
		c := callerFrom(r.Context())
		if c == nil {
			return nil, mcpauth.ErrInvalidToken
		}
		scopes := make([]string, len(c.ident.Scopes))
		for i, s := range c.ident.Scopes {
			scopes[i] = string(s)
		}
		return &mcpauth.TokenInfo{UserID: c.ident.Principal.ID, Scopes: scopes,
			Expiration: cfg.Now().Add(time.Hour)}, nil
	}, &mcpauth.RequireBearerTokenOptions{})
	return g, nil
}

// Invalidate makes every virtual server re-read its configuration (spec,
// connectors, pins) on its next request, and every upstream tool list be
// read again: the API calls it after changing them.
func (g *Gateway) Invalidate() {
	g.mu.Lock()
	for _, c := range g.catalogs {
		c.stale = true
	}
	g.mu.Unlock()
	g.gen.Add(1)
}

// Close closes the upstream sessions.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	sess := g.sessions
	g.sessions = map[string]*upstreamSession{}
	g.mu.Unlock()
	for _, s := range sess {
		s.close()
	}
}

// caller is the authenticated principal of a request and its virtual
// server.
type caller struct {
	ident auth.Identity
	vs    *vserver
	// authorization is the request's Authorization header: the builtin
	// connector calls the native API with it, as the same principal. It
	// never goes upstream.
	authorization string
}

type callerKey struct{}

func callerFrom(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// errorBody is the gateway's JSON error, the API's shape.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(b)
}

// ServerID returns the virtual server a path names (PathPrefix + id, or
// with a trailing slash).
func ServerID(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, PathPrefix)
	if !ok {
		return "", false
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// ServeHTTP serves PathPrefix + "{server}": the door checks the origin,
// the key, its scope and the grant, then hands the request to the go-sdk
// handler of its protocol era with the principal's virtual server.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := ServerID(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such MCP server")
		return
	}
	if !g.originAllowed(r) {
		writeError(w, http.StatusForbidden, "forbidden", "cross-origin request refused (Origin "+r.Header.Get("Origin")+")")
		return
	}
	q := r.URL.Query()
	for _, k := range []string{"access_token", "api_key", "token", "key"} {
		if q.Has(k) {
			writeError(w, http.StatusBadRequest, "validation_failed", "credentials are accepted only in the Authorization header")
			return
		}
	}
	challenge := `Bearer realm="warden", resource_metadata="` + g.resourceMetadataURL(id) + `", scope="` + string(ScopeUse) + `"`
	var ident auth.Identity
	var err error
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "+TokenPrefix); ok {
		// A token TokenPath issued: bound to one server's URL.
		ident, err = g.verifyToken(r.Context(), TokenPrefix+tok, id)
		if errors.Is(err, errTokenInvalid) || errors.Is(err, errTokenAudience) || errors.Is(err, auth.ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warden", error="invalid_token", error_description="`+
				strings.ReplaceAll(err.Error(), `"`, "'")+`", resource_metadata="`+g.resourceMetadataURL(id)+`"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "token refused: "+err.Error())
			return
		}
	} else {
		ident, err = g.cfg.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
	}
	if err != nil {
		if kind, _ := errkind.Of(err); kind == errkind.Unauthenticated || errors.Is(err, auth.ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "a Warden API key or an MCP token is required (Authorization: Bearer wdn_...)")
			return
		}
		g.log.Error("mcp gateway: authenticate", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "cannot check credentials now")
		return
	}
	if !ident.Has(ScopeUse) {
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+string(ScopeUse)+`"`)
		writeError(w, http.StatusForbidden, "forbidden", "the key lacks the "+string(ScopeUse)+" scope")
		return
	}
	telemetry.SetPrincipal(r.Context(), ident.Principal.ID) // also for MCP tokens (docs/tracing.md)
	granted, err := g.cachedGranted(r.Context(), id, ident.Principal.ID)
	if err != nil {
		g.log.Error("mcp gateway: read grants", "server", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "cannot read grants now")
		return
	}
	if !granted {
		// Not granted and not there look the same.
		writeError(w, http.StatusNotFound, "not_found", "no such MCP server")
		return
	}
	vs, err := g.virtualServer(r.Context(), id, ident)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, http.StatusNotFound, "not_found", "no such MCP server")
			return
		}
		g.log.Error("mcp gateway: build virtual server", "server", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the MCP server is not available: "+err.Error())
		return
	}
	c := &caller{ident: ident, vs: vs, authorization: r.Header.Get("Authorization")}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	h := g.stateful
	if newEra(r) {
		h = g.stateless
	}
	g.bearer(h).ServeHTTP(w, r)
}

// newEra reports whether a request speaks the stateless protocol
// (2026-07-28 on): its MCP-Protocol-Version header says so.
func newEra(r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	return v >= "2026-07-28" && r.Header.Get("Mcp-Session-Id") == ""
}

// originAllowed checks the Origin header against DNS rebinding and
// cross-site requests: absent (not a browser), the request's own host,
// PublicURL's, or one an admin listed.
func (g *Gateway) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	if g.cfg.PublicURL != "" {
		if pu, err := url.Parse(g.cfg.PublicURL); err == nil && strings.EqualFold(pu.Host, u.Host) && pu.Scheme == u.Scheme {
			return true
		}
	}
	for _, a := range g.cfg.AllowedOrigins {
		if strings.EqualFold(strings.TrimSuffix(a, "/"), u.Scheme+"://"+u.Host) {
			return true
		}
	}
	return false
}

// granted reports whether principal holds a grant of server.
func (g *Gateway) granted(ctx context.Context, server, principal string) (bool, error) {
	gs, err := g.cfg.Store.ListMCPGrants(ctx, server, principal)
	if err != nil {
		return false, err
	}
	return len(gs) > 0, nil
}

// auditEvent writes an audit event through the governed path's AuditLog
// (which logs a failure itself).
func (g *Gateway) auditEvent(ctx context.Context, e govern.AuditEvent) {
	if g.cfg.Audit == nil {
		return
	}
	_ = g.cfg.Audit.Write(ctx, e)
}
