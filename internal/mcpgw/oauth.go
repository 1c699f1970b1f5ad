package mcpgw

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
)

// OAuth 2.1 for remote connectors (docs/mcp.md): Warden is the OAuth
// client. StartOAuth discovers the upstream's authorization server (the
// protected resource metadata of RFC 9728, then the authorization server
// metadata of RFC 8414), registers Warden as a client when no client ID
// is configured (RFC 7591), and returns the authorization URL (code flow
// with PKCE S256 and the RFC 8707 resource indicator) the user opens. The
// authorization server redirects the browser to OAuthCallbackPath on
// wardend, which checks the state (single use, ten minutes), exchanges
// the code and keeps the tokens as a secret of the secrets store bound to
// the connector (credential kind "oauth") for the user, or shared. Calls
// upstream carry the access token, refreshed shortly before it expires
// and once more when the upstream answers 401. Tokens never go to the MCP
// client, the API caller or a sandbox.

// OAuthCallbackPath is the redirect URI's path on wardend.
const OAuthCallbackPath = "/mcp/oauth/callback"

// CredentialOAuth is the credential kind of tokens obtained by the flow.
const CredentialOAuth = "oauth"

const (
	oauthFlowTTL     = 10 * time.Minute
	oauthMaxPending  = 1000
	oauthRefreshSkew = 60 * time.Second
	oauthHTTPTimeout = 20 * time.Second
	oauthMaxBody     = 1 << 20
)

// Errors of StartOAuth, for the API to map.
var (
	// ErrOAuthInvalid: the connector cannot use OAuth (not remote, no
	// oauth settings) or the request is wrong.
	ErrOAuthInvalid = errors.New("oauth")
	// ErrOAuthUpstream: discovery, registration or the authorization
	// server failed.
	ErrOAuthUpstream = errors.New("oauth upstream")
)

// OAuthSecrets is what the flow needs of the secrets store besides
// reading: writing the tokens (*secrets.Vault).
type OAuthSecrets interface {
	Secrets
	Get(id string) (secrets.Secret, error)
	Put(name, owner string, value []byte) (secrets.Secret, error)
}

// OAuthStart is the start of a flow: the URL the user opens.
type OAuthStart struct {
	AuthorizeURL string    `json:"authorize_url"`
	RedirectURI  string    `json:"redirect_uri"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// oauthTokens is the secret's value: the tokens and what refreshing them
// needs.
type oauthTokens struct {
	AccessToken   string    `json:"access_token"`
	RefreshToken  string    `json:"refresh_token,omitempty"`
	Expiry        time.Time `json:"expiry,omitzero"`
	Scope         string    `json:"scope,omitempty"`
	TokenEndpoint string    `json:"token_endpoint"`
	ClientID      string    `json:"client_id"`
	// ClientSecret is a registered client's secret (RFC 7591); a
	// configured client's is read from OAuthSpec.ClientSecretID.
	ClientSecret   string `json:"client_secret,omitempty"`
	ClientSecretID string `json:"client_secret_id,omitempty"`
	Resource       string `json:"resource"`
}

// oauthFlow is a started flow, waiting for its callback.
type oauthFlow struct {
	connector string
	version   time.Time // the connector's UpdatedAt
	principal string    // "" for the shared credential
	owner     string    // who started it: owns the secret
	verifier  string
	redirect  string
	tokens    oauthTokens // endpoint, client and resource; no tokens yet
	expires   time.Time
}

// oauthState is the gateway's OAuth state.
type oauthState struct {
	mu      sync.Mutex
	flows   map[string]*oauthFlow  // state -> flow
	clients map[string]oauthClient // connector "\x00" issuer -> registered client
	refresh map[string]*sync.Mutex // secret ID -> refresh lock
}

type oauthClient struct {
	version time.Time
	id      string
	secret  string
}

func (g *Gateway) oauth() *oauthState {
	g.oauthOnce.Do(func() {
		g.oa = &oauthState{flows: map[string]*oauthFlow{}, clients: map[string]oauthClient{}, refresh: map[string]*sync.Mutex{}}
	})
	return g.oa
}

// RedirectURI is the OAuth redirect URI the gateway registers and sends.
func (g *Gateway) RedirectURI() string {
	return strings.TrimSuffix(g.cfg.PublicURL, "/") + OAuthCallbackPath
}

func randToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// StartOAuth starts the authorization-code flow for a remote connector
// with oauth settings: for principal's own credential, or the shared one
// (principal ""); owner, the caller, owns the secret that will hold the
// tokens.
func (g *Gateway) StartOAuth(ctx context.Context, connectorID, principal, owner string) (OAuthStart, error) {
	if g.cfg.PublicURL == "" {
		return OAuthStart{}, fmt.Errorf("%w: wardend has no public URL to redirect to", ErrOAuthInvalid)
	}
	if _, ok := g.cfg.Secrets.(OAuthSecrets); !ok {
		return OAuthStart{}, fmt.Errorf("%w: no secrets store to keep tokens in", ErrOAuthInvalid)
	}
	if g.cfg.HTTPClient == nil {
		return OAuthStart{}, fmt.Errorf("%w: remote connectors are not available on this daemon", ErrOAuthInvalid)
	}
	conn, err := g.cfg.Store.GetConnector(ctx, connectorID)
	if err != nil {
		return OAuthStart{}, err
	}
	sp, err := ParseConnectorSpec(conn.Kind, conn.Spec)
	if err != nil {
		return OAuthStart{}, fmt.Errorf("%w: connector %s: %w", ErrOAuthInvalid, connectorID, err)
	}
	rs, ok := sp.(*RemoteSpec)
	if !ok || rs.OAuth == nil {
		return OAuthStart{}, fmt.Errorf("%w: connector %s is not a remote connector with oauth settings", ErrOAuthInvalid, connectorID)
	}
	ctx, cancel := context.WithTimeout(ctx, oauthHTTPTimeout)
	defer cancel()
	hc := g.cfg.HTTPClient()
	resource, issuer, scopes, err := discoverResource(ctx, hc, rs)
	if err != nil {
		return OAuthStart{}, fmt.Errorf("%w: discover the authorization server of %s: %w", ErrOAuthUpstream, connectorID, err)
	}
	asm, err := authServerMeta(ctx, hc, issuer)
	if err != nil {
		return OAuthStart{}, fmt.Errorf("%w: authorization server %s: %w", ErrOAuthUpstream, issuer, err)
	}
	if len(rs.OAuth.Scopes) > 0 {
		scopes = rs.OAuth.Scopes
	}
	redirect := g.RedirectURI()
	tok := oauthTokens{TokenEndpoint: asm.TokenEndpoint, Resource: resource}
	if rs.OAuth.ClientID != "" {
		tok.ClientID, tok.ClientSecretID = rs.OAuth.ClientID, rs.OAuth.ClientSecretID
	} else {
		c, err := g.registeredClient(ctx, hc, conn, asm, redirect)
		if err != nil {
			return OAuthStart{}, fmt.Errorf("%w: register with %s: %w", ErrOAuthUpstream, issuer, err)
		}
		tok.ClientID, tok.ClientSecret = c.id, c.secret
	}
	verifier := randToken()
	sum := sha256.Sum256([]byte(verifier))
	state := randToken()
	now := g.cfg.Now()
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {tok.ClientID},
		"redirect_uri":          {redirect},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
		"resource":              {resource},
	}
	if len(scopes) > 0 {
		q.Set("scope", strings.Join(scopes, " "))
	}
	au, err := url.Parse(asm.AuthorizationEndpoint)
	if err != nil {
		return OAuthStart{}, fmt.Errorf("%w: authorization_endpoint: %w", ErrOAuthUpstream, err)
	}
	// Keep the endpoint's own query parameters.
	aq := au.Query()
	for k, v := range q {
		aq[k] = v
	}
	au.RawQuery = aq.Encode()
	f := &oauthFlow{connector: conn.ID, version: conn.UpdatedAt, principal: principal, owner: owner, verifier: verifier,
		redirect: redirect, tokens: tok, expires: now.Add(oauthFlowTTL)}
	o := g.oauth()
	o.mu.Lock()
	for k, p := range o.flows {
		if now.After(p.expires) {
			delete(o.flows, k)
		}
	}
	if len(o.flows) >= oauthMaxPending {
		o.mu.Unlock()
		return OAuthStart{}, fmt.Errorf("%w: too many authorizations in progress; try again later", ErrOAuthInvalid)
	}
	o.flows[state] = f
	o.mu.Unlock()
	return OAuthStart{AuthorizeURL: au.String(), RedirectURI: redirect, ExpiresAt: f.expires}, nil
}

// discoverResource reads the upstream's protected resource metadata: from
// the resource_metadata of its 401 challenge, else the well-known URLs
// (RFC 9728 section 3.1). It returns the resource (the RFC 8707
// indicator), the issuer to use and the resource's scopes.
func discoverResource(ctx context.Context, hc *http.Client, rs *RemoteSpec) (resource, issuer string, scopes []string, err error) {
	u, err := url.Parse(rs.URL)
	if err != nil {
		return "", "", nil, err
	}
	var cands []string
	// An unauthenticated request: a protected MCP server answers 401 with
	// WWW-Authenticate: Bearer resource_metadata="...".
	if req, err := http.NewRequestWithContext(ctx, http.MethodPost, rs.URL,
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)); err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if resp, err := hc.Do(req); err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, oauthMaxBody))
			resp.Body.Close()
			if cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate")); err == nil {
				for _, c := range cs {
					if m := c.Params["resource_metadata"]; c.Scheme == "bearer" && m != "" {
						cands = append(cands, m)
					}
				}
			}
		}
	}
	base := u.Scheme + "://" + u.Host
	if p := strings.TrimSuffix(u.EscapedPath(), "/"); p != "" {
		cands = append(cands, base+"/.well-known/oauth-protected-resource"+p)
	}
	cands = append(cands, base+"/.well-known/oauth-protected-resource")
	var lastErr error
	for _, m := range cands {
		mu, err := url.Parse(m)
		if err != nil || mu.Scheme != u.Scheme || mu.Host != u.Host {
			lastErr = fmt.Errorf("resource metadata %q is not on the upstream's origin", m)
			continue
		}
		var prm oauthex.ProtectedResourceMetadata
		found, err := getJSON(ctx, hc, m, &prm)
		if err != nil {
			lastErr = err
			continue
		}
		if !found {
			continue
		}
		if strings.TrimSuffix(prm.Resource, "/") != strings.TrimSuffix(rs.URL, "/") {
			return "", "", nil, fmt.Errorf("resource metadata names resource %q, not %q", prm.Resource, rs.URL)
		}
		iss := rs.OAuth.AuthorizationServer
		if iss == "" {
			if len(prm.AuthorizationServers) == 0 {
				return "", "", nil, errors.New("resource metadata lists no authorization server")
			}
			iss = prm.AuthorizationServers[0]
		} else if len(prm.AuthorizationServers) > 0 && !slices.Contains(prm.AuthorizationServers, iss) {
			return "", "", nil, fmt.Errorf("the resource does not list authorization server %q", iss)
		}
		return prm.Resource, iss, prm.ScopesSupported, nil
	}
	if rs.OAuth.AuthorizationServer != "" {
		return rs.URL, rs.OAuth.AuthorizationServer, nil, nil
	}
	if lastErr != nil {
		return "", "", nil, lastErr
	}
	return "", "", nil, errors.New("the upstream publishes no protected resource metadata; set oauth.authorization_server")
}

// authServerMeta reads an issuer's metadata (RFC 8414, then OpenID
// discovery) and checks it: the same issuer, an authorization and a token
// endpoint, and PKCE with S256.
func authServerMeta(ctx context.Context, hc *http.Client, issuer string) (*oauthex.AuthServerMeta, error) {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("issuer %q is not an http(s) URL", issuer)
	}
	base := u.Scheme + "://" + u.Host
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	cands := []string{base + "/.well-known/oauth-authorization-server" + p, base + "/.well-known/openid-configuration" + p}
	if p != "" {
		cands = append(cands, base+p+"/.well-known/openid-configuration")
	}
	for _, m := range cands {
		var asm oauthex.AuthServerMeta
		found, err := getJSON(ctx, hc, m, &asm)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if strings.TrimSuffix(asm.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
			return nil, fmt.Errorf("metadata names issuer %q, not %q", asm.Issuer, issuer)
		}
		if !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
			return nil, errors.New("the authorization server does not offer PKCE with S256")
		}
		for _, e := range []string{asm.AuthorizationEndpoint, asm.TokenEndpoint, asm.RegistrationEndpoint} {
			if e == "" {
				continue
			}
			eu, err := url.Parse(e)
			if err != nil || (eu.Scheme != "https" && eu.Scheme != "http") || eu.Host == "" {
				return nil, fmt.Errorf("endpoint %q is not an http(s) URL", e)
			}
		}
		if asm.AuthorizationEndpoint == "" || asm.TokenEndpoint == "" {
			return nil, errors.New("metadata lacks an authorization or token endpoint")
		}
		return &asm, nil
	}
	return nil, errors.New("no authorization server metadata found")
}

// getJSON GETs url into v; found is false on a 404 (or 405/400: no such
// document).
func getJSON(ctx context.Context, hc *http.Client, u string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, oauthMaxBody+1))
	if err != nil {
		return false, err
	}
	if len(body) > oauthMaxBody {
		return false, fmt.Errorf("GET %s: over %d bytes", u, oauthMaxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("GET %s: %w", u, err)
	}
	return true, nil
}

// registeredClient registers Warden with the authorization server
// (RFC 7591) once per connector version and issuer.
func (g *Gateway) registeredClient(ctx context.Context, hc *http.Client, conn store.MCPConnector, asm *oauthex.AuthServerMeta, redirect string) (oauthClient, error) {
	o := g.oauth()
	key := conn.ID + "\x00" + asm.Issuer
	o.mu.Lock()
	c, ok := o.clients[key]
	o.mu.Unlock()
	if ok && c.version.Equal(conn.UpdatedAt) {
		return c, nil
	}
	if asm.RegistrationEndpoint == "" {
		return oauthClient{}, errors.New("the authorization server offers no client registration; set oauth.client_id")
	}
	body, _ := json.Marshal(map[string]any{
		"client_name":                "Warden MCP gateway (" + conn.ID + ")",
		"redirect_uris":              []string{redirect},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, asm.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return oauthClient{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return oauthClient{}, err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, oauthMaxBody))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return oauthClient{}, fmt.Errorf("registration: status %d: %s", resp.StatusCode, oauthErrorText(rb))
	}
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.Unmarshal(rb, &out); err != nil || out.ClientID == "" {
		return oauthClient{}, fmt.Errorf("registration: no client_id in the answer")
	}
	c = oauthClient{version: conn.UpdatedAt, id: out.ClientID, secret: out.ClientSecret}
	o.mu.Lock()
	o.clients[key] = c
	o.mu.Unlock()
	return c, nil
}

// oauthErrorText is an OAuth error answer's error and description, short.
func oauthErrorText(b []byte) string {
	var e struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		s := e.Error
		if e.Description != "" {
			s += ": " + e.Description
		}
		return truncateText(s, 200)
	}
	return truncateText(strings.TrimSpace(string(b)), 200)
}

func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// tokenRequest posts a token request (code or refresh) and returns the
// new tokens on top of t.
func (g *Gateway) tokenRequest(ctx context.Context, t oauthTokens, form url.Values) (oauthTokens, error) {
	if g.cfg.HTTPClient == nil {
		return t, errors.New("remote connectors are not available on this daemon")
	}
	form.Set("client_id", t.ClientID)
	if t.Resource != "" {
		form.Set("resource", t.Resource)
	}
	secret := t.ClientSecret
	if t.ClientSecretID != "" && g.cfg.Secrets != nil {
		v, _, err := g.cfg.Secrets.Current(t.ClientSecretID)
		if err != nil {
			return t, fmt.Errorf("client secret: %w", err)
		}
		secret = string(v)
	}
	if secret != "" {
		form.Set("client_secret", secret)
	}
	ctx, cancel := context.WithTimeout(ctx, oauthHTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return t, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := g.cfg.HTTPClient().Do(req)
	if err != nil {
		return t, fmt.Errorf("token endpoint: %w", err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, oauthMaxBody))
	if resp.StatusCode != http.StatusOK {
		return t, fmt.Errorf("token endpoint: status %d: %s", resp.StatusCode, oauthErrorText(rb))
	}
	var out struct {
		AccessToken  string `json:"access_token"`
		TokenType    string `json:"token_type"`
		ExpiresIn    int64  `json:"expires_in"`
		RefreshToken string `json:"refresh_token"`
		Scope        string `json:"scope"`
	}
	if err := json.Unmarshal(rb, &out); err != nil {
		return t, fmt.Errorf("token endpoint: %w", err)
	}
	if out.AccessToken == "" || !strings.EqualFold(out.TokenType, "bearer") {
		return t, fmt.Errorf("token endpoint: no bearer access token in the answer")
	}
	if strings.ContainsAny(out.AccessToken+out.RefreshToken, "\r\n") {
		return t, errors.New("token endpoint: a token holds a line break")
	}
	t.AccessToken = out.AccessToken
	if out.RefreshToken != "" { // rotated; else the old one stays
		t.RefreshToken = out.RefreshToken
	}
	t.Expiry = time.Time{}
	if out.ExpiresIn > 0 {
		t.Expiry = g.cfg.Now().Add(time.Duration(out.ExpiresIn) * time.Second).UTC()
	}
	if out.Scope != "" {
		t.Scope = out.Scope
	}
	return t, nil
}

// ServeOAuthCallback serves OAuthCallbackPath: the authorization server
// sends the user's browser here with the code and the state.
func (g *Gateway) ServeOAuthCallback(w http.ResponseWriter, r *http.Request) {
	page := func(status int, msg string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		w.WriteHeader(status)
		fmt.Fprintf(w, "<!doctype html><title>Warden</title><p>%s</p>\n", html.EscapeString(msg))
	}
	if r.Method != http.MethodGet {
		page(http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	o := g.oauth()
	o.mu.Lock()
	f := o.flows[state]
	delete(o.flows, state) // single use, whatever comes next
	o.mu.Unlock()
	if state == "" || f == nil || g.cfg.Now().After(f.expires) {
		page(http.StatusBadRequest, "This authorization is unknown, used or expired. Start it again with `warden mcp connector auth`.")
		return
	}
	detail := map[string]any{"connector": f.connector, "principal_id": f.principal}
	fail := func(status int, msg string, err error) {
		detail["error"] = msg
		if err != nil {
			g.log.Warn("mcp gateway: oauth callback", "connector", f.connector, "err", err)
			detail["error"] = msg + ": " + err.Error()
		}
		g.auditEvent(r.Context(), govern.AuditEvent{Principal: f.owner, Name: "mcp.oauth_authorize",
			Target: "mcp-connector:" + f.connector, Outcome: govern.AuditError, Detail: detail})
		page(status, msg)
	}
	if e := q.Get("error"); e != "" {
		fail(http.StatusBadRequest, "The authorization server refused: "+truncateText(e+" "+q.Get("error_description"), 200), nil)
		return
	}
	code := q.Get("code")
	if code == "" {
		fail(http.StatusBadRequest, "The authorization server sent no code.", nil)
		return
	}
	ctx := context.WithoutCancel(r.Context())
	conn, err := g.cfg.Store.GetConnector(ctx, f.connector)
	if err != nil || !conn.UpdatedAt.Equal(f.version) {
		fail(http.StatusConflict, "The connector changed or went away during the authorization; start it again.", err)
		return
	}
	tok, err := g.tokenRequest(ctx, f.tokens, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {f.redirect}, "code_verifier": {f.verifier}})
	if err != nil {
		fail(http.StatusBadGateway, "Exchanging the code failed", err)
		return
	}
	sec, ok := g.cfg.Secrets.(OAuthSecrets)
	if !ok {
		fail(http.StatusInternalServerError, "No secrets store to keep the tokens in", nil)
		return
	}
	val, _ := json.Marshal(tok)
	name := "mcp-oauth-" + f.connector
	if f.principal == "" {
		name += "-shared"
	}
	s, err := sec.Put(name, f.owner, val)
	if err != nil {
		fail(http.StatusInternalServerError, "Storing the tokens failed", err)
		return
	}
	now := g.cfg.Now().UTC()
	c := store.MCPCredential{Connector: f.connector, PrincipalID: f.principal, Kind: CredentialOAuth, SecretID: s.ID,
		CreatedAt: now, CreatedBy: f.owner, UpdatedAt: now}
	if old, err := g.cfg.Store.GetMCPCredential(ctx, f.connector, f.principal); err == nil {
		c.CreatedAt, c.CreatedBy = old.CreatedAt, old.CreatedBy
	}
	if err := g.cfg.Store.PutMCPCredential(ctx, c); err != nil {
		fail(http.StatusInternalServerError, "Binding the tokens to the connector failed", err)
		return
	}
	g.ForgetConnector(f.connector)
	g.Invalidate()
	detail["secret_id"] = s.ID
	detail["scope"] = tok.Scope
	g.auditEvent(ctx, govern.AuditEvent{Principal: f.owner, Name: "mcp.oauth_authorize",
		Target: "mcp-connector:" + f.connector, Outcome: govern.AuditSuccess, Detail: detail})
	page(http.StatusOK, "Warden is authorized for connector "+f.connector+". You can close this window.")
}

// oauthAccess returns the access token kept in secretID, refreshed first
// when it expires within a minute, or when force is set and the kept one
// is still stale (the one the upstream refused).
func (g *Gateway) oauthAccess(ctx context.Context, connector, secretID string, force bool, stale string) (string, error) {
	o := g.oauth()
	o.mu.Lock()
	l := o.refresh[secretID]
	if l == nil {
		l = &sync.Mutex{}
		o.refresh[secretID] = l
	}
	o.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	raw, _, err := g.cfg.Secrets.Current(secretID)
	if err != nil {
		return "", fmt.Errorf("connector credential: %w", err)
	}
	var t oauthTokens
	if err := json.Unmarshal(raw, &t); err != nil || t.AccessToken == "" {
		return "", errors.New("connector credential: the oauth secret does not hold tokens")
	}
	expiring := !t.Expiry.IsZero() && g.cfg.Now().Add(oauthRefreshSkew).After(t.Expiry)
	if !(expiring || force && t.AccessToken == stale) {
		return t.AccessToken, nil
	}
	if t.RefreshToken == "" {
		if force || g.cfg.Now().After(t.Expiry) {
			return "", fmt.Errorf("connector %s: the OAuth access token expired and there is no refresh token; authorize again (warden mcp connector auth %s)", connector, connector)
		}
		return t.AccessToken, nil
	}
	nt, err := g.tokenRequest(ctx, t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {t.RefreshToken}})
	if err != nil {
		g.auditEvent(ctx, govern.AuditEvent{Principal: "system", Name: "mcp.oauth_refresh", Target: "mcp-connector:" + connector,
			Outcome: govern.AuditError, Detail: map[string]any{"connector": connector, "secret_id": secretID, "error": err.Error()}})
		return "", fmt.Errorf("connector %s: refresh the OAuth token (authorize again with warden mcp connector auth %s if it persists): %w", connector, connector, err)
	}
	sec, ok := g.cfg.Secrets.(OAuthSecrets)
	if !ok {
		return "", errors.New("connector credential: the secrets store cannot be written")
	}
	meta, err := sec.Get(secretID)
	if err != nil {
		return "", fmt.Errorf("connector credential: %w", err)
	}
	val, _ := json.Marshal(nt)
	if _, err := sec.Put(meta.Name, meta.Owner, val); err != nil {
		return "", fmt.Errorf("connector credential: keep the refreshed token: %w", err)
	}
	g.auditEvent(ctx, govern.AuditEvent{Principal: "system", Name: "mcp.oauth_refresh", Target: "mcp-connector:" + connector,
		Outcome: govern.AuditSuccess, Detail: map[string]any{"connector": connector, "secret_id": secretID}})
	return nt.AccessToken, nil
}
