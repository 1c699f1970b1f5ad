package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/telemetry"
	"github.com/warden-sandbox/warden/internal/version"
)

// Upstreams: the gateway keeps one client session per (connector,
// credential): the connector's shared credential (or none) is one
// session for every principal, a principal's own credential (or, for a
// hosted connector run per user, the principal) its own. Sessions are
// opened on first use and again after they die.

// maxUpstreamTools bounds the tools read from one upstream.
const maxUpstreamTools = 1000

// connectTimeout bounds opening an upstream session.
const connectTimeout = 30 * time.Second

// liveTool is an upstream tool as it is now.
type liveTool struct {
	tool *mcp.Tool
	def  json.RawMessage
	hash string
}

// catalog is an upstream's tool list, and its prompts, resources and
// resource templates when it offers them, read at most every CatalogTTL.
type catalog struct {
	tools     []liveTool
	prompts   []*mcp.Prompt
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
	caps      *mcp.ServerCapabilities // the upstream's (nil: builtin)
	readAt    time.Time
	version   time.Time // the connector's UpdatedAt it was read for
	stale     bool
}

// upstreamSession is an open client session to an upstream.
type upstreamSession struct {
	key     string
	version time.Time // the connector's UpdatedAt it was opened for
	mu      sync.Mutex
	cs      *mcp.ClientSession
	// done is closed when cs ends (the upstream went away: a hosted
	// server's process or sandbox died, a remote server closed it); the
	// next use opens a new session instead of failing on the dead one.
	done chan struct{}
}

// live reports whether the session's connection is still open (s.mu
// held).
func (s *upstreamSession) live() bool {
	if s.cs == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *upstreamSession) close() {
	s.mu.Lock()
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	if cs != nil {
		cs.Close()
	}
}

// binding is the credential a principal's calls to a connector use.
type binding struct {
	key      string // identifies the session: "shared", "none", "p:<principal>"
	secretID string // "" for none
	kind     string // the credential's kind: "header" or CredentialOAuth
}

// credentialFor picks the connector's credential for principal: its own
// binding, else the shared one, else none.
func (g *Gateway) credentialFor(ctx context.Context, conn store.MCPConnector, principal string) (binding, error) {
	if conn.Kind == store.MCPConnectorBuiltin {
		return binding{key: "none"}, nil
	}
	perUser := false
	if conn.Kind == store.MCPConnectorHosted {
		if s, err := ParseConnectorSpec(conn.Kind, conn.Spec); err == nil {
			perUser = s.(*HostedSpec).PerUser
		}
	}
	b := binding{key: "none"}
	if c, err := g.cfg.Store.GetMCPCredential(ctx, conn.ID, principal); err == nil {
		b = binding{key: "p:" + principal, secretID: c.SecretID, kind: c.Kind}
	} else if !errors.Is(err, store.ErrNotFound) {
		return binding{}, fmt.Errorf("read credential: %w", err)
	} else if c, err := g.cfg.Store.GetMCPCredential(ctx, conn.ID, ""); err == nil {
		b = binding{key: "shared", secretID: c.SecretID, kind: c.Kind}
	} else if !errors.Is(err, store.ErrNotFound) {
		return binding{}, fmt.Errorf("read credential: %w", err)
	}
	if perUser {
		b.key = "p:" + principal
	}
	// A new binding (another secret) is another session.
	b.key += "\x00" + b.secretID
	return b, nil
}

// upstreamCatalog returns the connector's current tools, prompts and
// resources as the principal's credential sees them.
func (g *Gateway) upstreamCatalog(ctx context.Context, conn store.MCPConnector, principal string) (*catalog, error) {
	if conn.Kind == store.MCPConnectorBuiltin {
		tools, err := builtinCatalog(conn)
		if err != nil {
			return nil, err
		}
		return &catalog{tools: tools}, nil
	}
	b, err := g.credentialFor(ctx, conn, principal)
	if err != nil {
		return nil, err
	}
	key := conn.ID + "\x00" + b.key
	now := g.cfg.Now()
	g.mu.Lock()
	c := g.catalogs[key]
	fresh := c != nil && !c.stale && c.version.Equal(conn.UpdatedAt) && now.Sub(c.readAt) < g.cfg.CatalogTTL
	g.mu.Unlock()
	if fresh {
		return c, nil
	}
	var nc *catalog
	ctx = withoutLink(ctx) // lists are read on the shared session
	err = g.withSession(ctx, conn, principal, b, true, func(cs *mcp.ClientSession) error {
		nc = &catalog{readAt: now, version: conn.UpdatedAt}
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			if len(nc.tools) >= maxUpstreamTools {
				return fmt.Errorf("upstream lists over %d tools", maxUpstreamTools)
			}
			def, hash, err := ToolDefinition(t)
			if err != nil {
				return err
			}
			nc.tools = append(nc.tools, liveTool{tool: t, def: def, hash: hash})
		}
		return g.readExtras(ctx, conn, cs, nc)
	})
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.catalogs[key] = nc
	g.mu.Unlock()
	return nc, nil
}

// withSession runs fn with the upstream session of (conn, b), opening it
// if needed. A session fn finds closed is dropped (the next use opens a
// new one); with retry, fn runs once more on a new session.
func (g *Gateway) withSession(ctx context.Context, conn store.MCPConnector, principal string, b binding, retry bool, fn func(*mcp.ClientSession) error) error {
	for attempt := 0; ; attempt++ {
		s, cs, err := g.session(ctx, conn, principal, b)
		if err != nil {
			return err
		}
		err = fn(cs)
		var werr *jsonrpc.Error
		if err == nil || errors.As(err, &werr) || ctx.Err() != nil {
			return err // the upstream answered (or the caller gave up)
		}
		g.dropSession(s)
		if !retry || attempt > 0 || !errors.Is(err, mcp.ErrConnectionClosed) {
			return err
		}
	}
}

// session returns the open session of (conn, b), opening one, and its
// client session, read under the session's lock (s.cs may change once it
// is released: another call reopens or drops it).
func (g *Gateway) session(ctx context.Context, conn store.MCPConnector, principal string, b binding) (*upstreamSession, *mcp.ClientSession, error) {
	key := conn.ID + "\x00" + b.key
	l := sessionLink(ctx, conn) // a client's own relay session (relay.go)
	if l != nil {
		key += l.relayKey()
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, nil, errors.New("mcp gateway: closed")
	}
	s := g.sessions[key]
	if s == nil || !s.version.Equal(conn.UpdatedAt) {
		if s != nil {
			go s.close()
		}
		s = &upstreamSession{key: key, version: conn.UpdatedAt}
		g.sessions[key] = s
	}
	g.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() {
		return s, s.cs, nil
	}
	if s.cs != nil {
		s.cs.Close()
		s.cs = nil
	}
	tr, err := g.transport(ctx, conn, principal, b)
	if err != nil {
		return nil, nil, err
	}
	tapped := false
	if l != nil {
		if t := tapTransport(tr, l); t != nil {
			tr, tapped = t, true
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "warden-mcp-gateway", Version: version.Version}, g.clientOptions(conn, l, tapped, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Re-read the list; the approved set decides what clients see.
			g.markStale(conn.ID)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			g.forwardProgress(req.Params)
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			g.markStale(conn.ID)
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			g.markStale(conn.ID)
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			// Not on the connection's reader: a virtual server may be
			// waiting on this session while it holds its lock.
			go g.forwardResourceUpdated(context.WithoutCancel(ctx), conn.ID, req.Params)
		},
	}))
	// Not the client request's context: the go-sdk server put the
	// client's protocol version in it, which the go-sdk client would send
	// as its own (a stateless client's would make a session-era upstream
	// refuse the gateway's initialize).
	cctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	cs, err := client.Connect(cctx, tr, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to connector %s: %w", conn.ID, err)
	}
	if l != nil {
		if !l.adopt(s) {
			// The client session ended meanwhile.
			cs.Close()
			g.mu.Lock()
			if g.sessions[key] == s {
				delete(g.sessions, key)
			}
			g.mu.Unlock()
			return nil, nil, errors.New("the client session ended")
		}
		l.applyLevel(cctx, cs)
	}
	s.cs = cs
	done := make(chan struct{})
	s.done = done
	go func() {
		cs.Wait()
		close(done)
	}()
	return s, cs, nil
}

// markStale makes the connector's lists be read again on next use (the
// upstream said one changed).
func (g *Gateway) markStale(connectorID string) {
	g.mu.Lock()
	for k, c := range g.catalogs {
		if strings.HasPrefix(k, connectorID+"\x00") {
			c.stale = true
		}
	}
	g.mu.Unlock()
	g.gen.Add(1)
}

// dropSession forgets a session (it is reopened on next use).
func (g *Gateway) dropSession(s *upstreamSession) {
	g.mu.Lock()
	if g.sessions[s.key] == s {
		delete(g.sessions, s.key)
	}
	g.mu.Unlock()
	s.close()
}

// ForgetConnector closes a connector's upstream sessions and forgets its
// tool lists: the API calls it when the connector or its credentials
// change or go.
func (g *Gateway) ForgetConnector(id string) {
	var drop []*upstreamSession
	g.mu.Lock()
	for k, s := range g.sessions {
		if strings.HasPrefix(k, id+"\x00") {
			drop = append(drop, s)
			delete(g.sessions, k)
		}
	}
	for k := range g.catalogs {
		if strings.HasPrefix(k, id+"\x00") {
			delete(g.catalogs, k)
		}
	}
	g.mu.Unlock()
	for _, s := range drop {
		s.close()
	}
	g.gen.Add(1)
}

// transport makes the transport to a connector's upstream.
func (g *Gateway) transport(ctx context.Context, conn store.MCPConnector, principal string, b binding) (mcp.Transport, error) {
	spec, err := ParseConnectorSpec(conn.Kind, conn.Spec)
	if err != nil {
		return nil, fmt.Errorf("connector %s: %w", conn.ID, err)
	}
	switch s := spec.(type) {
	case *RemoteSpec:
		if g.cfg.HTTPClient == nil {
			return nil, errors.New("remote connectors are not available on this daemon")
		}
		if s.OAuth != nil && b.secretID == "" {
			return nil, fmt.Errorf("connector %s needs OAuth authorization for this principal first (warden mcp connector auth %s)", conn.ID, conn.ID)
		}
		if s.Auth != nil && s.Auth.Required && b.secretID == "" {
			return nil, fmt.Errorf("connector %s needs a credential and there is none for this principal", conn.ID)
		}
		base := g.cfg.HTTPClient()
		hc := *base
		hc.Transport = &credentialTransport{base: base.Transport, g: g, auth: s.Auth, secretID: b.secretID,
			oauth: b.kind == CredentialOAuth, connector: conn.ID}
		if s.Transport == "sse" {
			return &mcp.SSEClientTransport{Endpoint: s.URL, HTTPClient: &hc, MaxEventSize: g.cfg.MaxResultBytes + 64<<10}, nil
		}
		return &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &hc, MaxRetries: 2,
			MaxEventSize: g.cfg.MaxResultBytes + 64<<10}, nil
	case *HostedSpec:
		if g.cfg.Hosted == nil {
			return nil, errors.New("hosted connectors are not available on this daemon")
		}
		p := ""
		if s.PerUser {
			p = principal
		}
		return g.cfg.Hosted.Transport(ctx, conn.ID, conn.Spec, p)
	}
	return nil, fmt.Errorf("connector %s: kind %s has no upstream session", conn.ID, conn.Kind)
}

// credentialTransport sends a remote connector's requests with the
// connector's credential, read from the secrets store on each request
// (a rotated or revoked secret takes effect at once), and never with a
// client's Authorization or cookies (the gateway builds its upstream
// requests itself; these are dropped all the same).
type credentialTransport struct {
	base     http.RoundTripper
	g        *Gateway
	auth     *AuthSpec
	secretID string
	// oauth: the secret holds OAuth tokens (oauth.go): the access token
	// is sent as a bearer token, refreshed before it expires and once
	// more when the upstream answers 401.
	oauth     bool
	connector string
}

func (t *credentialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Del("Authorization")
	r.Header.Del("Cookie")
	telemetry.Inject(r.Context(), r.Header) // traceparent, when tracing is on (trace.go)
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.oauth && t.secretID != "" {
		if t.g.cfg.Secrets == nil {
			return nil, errors.New("connector credential: no secrets store")
		}
		tok, err := t.g.oauthAccess(r.Context(), t.connector, t.secretID, false, "")
		if err != nil {
			return nil, err
		}
		r.Header.Set("Authorization", "Bearer "+tok)
		resp, err := base.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusUnauthorized || (r.Body != nil && r.GetBody == nil) {
			return resp, err
		}
		// Refused: refresh (unless another request did already) and try
		// once more.
		nt, rerr := t.g.oauthAccess(r.Context(), t.connector, t.secretID, true, tok)
		if rerr != nil || nt == tok {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		r2 := r.Clone(r.Context())
		if r.GetBody != nil {
			if r2.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
		r2.Header.Set("Authorization", "Bearer "+nt)
		return base.RoundTrip(r2)
	}
	if t.secretID != "" {
		if t.g.cfg.Secrets == nil {
			return nil, errors.New("connector credential: no secrets store")
		}
		v, _, err := t.g.cfg.Secrets.Current(t.secretID)
		if err != nil {
			return nil, fmt.Errorf("connector credential: %w", err)
		}
		header, scheme := "Authorization", "Bearer"
		if a := t.auth; a != nil {
			if a.Header != "" {
				header = a.Header
				scheme = ""
			}
			if a.Scheme != "" {
				scheme = a.Scheme
			}
		}
		val := string(v)
		if strings.ContainsAny(val, "\r\n") {
			return nil, errors.New("connector credential: the secret holds a line break")
		}
		if scheme != "" {
			val = scheme + " " + val
		}
		r.Header.Set(header, val)
	}
	return base.RoundTrip(r)
}
