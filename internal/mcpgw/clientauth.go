package mcpgw

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
)

// MCP authorization for clients (docs/mcp.md): each virtual server is an
// OAuth protected resource (RFC 9728) whose authorization server is
// wardend itself. A client that speaks the MCP authorization spec finds,
// from the 401's WWW-Authenticate resource_metadata, the metadata at
// ResourceMetadataPrefix + "/mcp/v/{server}", then wardend's
// authorization server metadata, and gets a token at TokenPath by
// presenting a Warden API key (client_credentials with the key as the
// client secret, or an RFC 8693 token exchange with the key as the
// subject token) and naming the virtual server's URL as its resource
// (RFC 8707). The token is bound to that one URL (its audience): the
// gateway refuses it for any other server and the API refuses it
// altogether. It lasts TokenTTL at most and dies with its key. Warden API
// keys keep working as bearer tokens.

const (
	// ResourceMetadataPrefix is where a virtual server's protected
	// resource metadata is: ResourceMetadataPrefix + PathPrefix + id.
	ResourceMetadataPrefix = "/.well-known/oauth-protected-resource"
	// AuthServerMetadataPath is wardend's authorization server metadata.
	AuthServerMetadataPath = "/.well-known/oauth-authorization-server"
	// TokenPath is wardend's token endpoint for MCP clients.
	TokenPath = "/mcp/token"
	// TokenPrefix starts the tokens TokenPath issues.
	TokenPrefix = "wmt_"
	// TokenTTL is a token's longest life.
	TokenTTL = time.Hour
)

const (
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeAccess    = "urn:ietf:params:oauth:token-type:access_token"
)

// KeyIdentity returns the identity of an API key by its ID when it may
// still act (not revoked, its principal there): tokens die with their key.
type KeyIdentity func(ctx context.Context, keyID string) (auth.Identity, error)

// tokenClaims is a token's payload.
type tokenClaims struct {
	Sub string `json:"sub"` // principal
	Kid string `json:"kid"` // the API key it was issued for
	Aud string `json:"aud"` // the virtual server's URL
	Iat int64  `json:"iat"`
	Exp int64  `json:"exp"`
}

// serverURL is a virtual server's canonical URL (its resource).
func (g *Gateway) serverURL(id string) string {
	return strings.TrimSuffix(g.cfg.PublicURL, "/") + PathPrefix + id
}

func (g *Gateway) resourceMetadataURL(id string) string {
	return strings.TrimSuffix(g.cfg.PublicURL, "/") + ResourceMetadataPrefix + PathPrefix + id
}

// clientAuthOn reports whether the gateway issues and accepts tokens.
func (g *Gateway) clientAuthOn() bool {
	return len(g.cfg.TokenKey) >= 32 && g.cfg.KeyIdentity != nil && g.cfg.PublicURL != ""
}

func (g *Gateway) signToken(c tokenClaims) string {
	p, _ := json.Marshal(c)
	body := base64.RawURLEncoding.EncodeToString(p)
	m := hmac.New(sha256.New, g.cfg.TokenKey)
	m.Write([]byte(TokenPrefix + body))
	return TokenPrefix + body + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

var (
	errTokenInvalid  = errors.New("invalid token")
	errTokenAudience = errors.New("the token is for another resource")
)

// verifyToken checks a token's signature, life and audience (the server
// id's URL) and returns its key's current identity.
func (g *Gateway) verifyToken(ctx context.Context, tok, id string) (auth.Identity, error) {
	if !g.clientAuthOn() {
		return auth.Identity{}, errTokenInvalid
	}
	body, sig, ok := strings.Cut(strings.TrimPrefix(tok, TokenPrefix), ".")
	if !ok {
		return auth.Identity{}, errTokenInvalid
	}
	m := hmac.New(sha256.New, g.cfg.TokenKey)
	m.Write([]byte(TokenPrefix + body))
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || !hmac.Equal(got, m.Sum(nil)) {
		return auth.Identity{}, errTokenInvalid
	}
	p, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return auth.Identity{}, errTokenInvalid
	}
	var c tokenClaims
	if err := json.Unmarshal(p, &c); err != nil {
		return auth.Identity{}, errTokenInvalid
	}
	if g.cfg.Now().Unix() >= c.Exp {
		return auth.Identity{}, fmt.Errorf("%w: expired", errTokenInvalid)
	}
	if c.Aud != g.serverURL(id) {
		return auth.Identity{}, errTokenAudience
	}
	ident, err := g.cfg.KeyIdentity(ctx, c.Kid)
	if err != nil {
		return auth.Identity{}, err
	}
	if ident.Principal.ID != c.Sub {
		return auth.Identity{}, errTokenInvalid
	}
	return ident, nil
}

// ServeResourceMetadata serves ResourceMetadataPrefix + PathPrefix + id:
// the same for every well-formed id (it tells nothing of which exist).
func (g *Gateway) ServeResourceMetadata(w http.ResponseWriter, r *http.Request) {
	id, ok := ServerID(strings.TrimPrefix(r.URL.Path, ResourceMetadataPrefix))
	if !ok || g.cfg.PublicURL == "" {
		writeError(w, http.StatusNotFound, "not_found", "no such resource")
		return
	}
	m := map[string]any{
		"resource":                 g.serverURL(id),
		"bearer_methods_supported": []string{"header"},
		"scopes_supported":         []string{string(ScopeUse)},
		"resource_name":            "Warden MCP server " + id,
	}
	if g.clientAuthOn() {
		m["authorization_servers"] = []string{strings.TrimSuffix(g.cfg.PublicURL, "/")}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	json.NewEncoder(w).Encode(m)
}

// ServeAuthServerMetadata serves AuthServerMetadataPath (RFC 8414).
func (g *Gateway) ServeAuthServerMetadata(w http.ResponseWriter, r *http.Request) {
	if !g.clientAuthOn() {
		writeError(w, http.StatusNotFound, "not_found", "wardend issues no MCP tokens")
		return
	}
	iss := strings.TrimSuffix(g.cfg.PublicURL, "/")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                iss,
		"token_endpoint":                        iss + TokenPath,
		"grant_types_supported":                 []string{"client_credentials", grantTokenExchange},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"scopes_supported":                      []string{string(ScopeUse)},
		"response_types_supported":              []string{},
		// Warden has no authorization endpoint; a client asking about
		// PKCE learns what it would use.
		"code_challenge_methods_supported": []string{"S256"},
	})
}

// oauthError writes an RFC 6749 error answer.
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="warden"`)
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

// ServeToken serves TokenPath: an API key (holding mcp:use, its principal
// granted the server) is exchanged for a token whose audience is one
// virtual server's URL, named by the resource parameter.
func (g *Gateway) ServeToken(w http.ResponseWriter, r *http.Request) {
	if !g.clientAuthOn() {
		oauthError(w, http.StatusNotFound, "invalid_request", "wardend issues no MCP tokens")
		return
	}
	if r.Method != http.MethodPost {
		oauthError(w, http.StatusMethodNotAllowed, "invalid_request", "POST only")
		return
	}
	if len(r.URL.RawQuery) > 0 {
		oauthError(w, http.StatusBadRequest, "invalid_request", "parameters go in the form body, not the query")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "a form body (application/x-www-form-urlencoded) is required")
		return
	}
	f := r.PostForm
	var key string
	switch f.Get("grant_type") {
	case "client_credentials":
		if _, secret, ok := r.BasicAuth(); ok {
			key = secret
		} else {
			key = f.Get("client_secret")
		}
	case grantTokenExchange:
		if tt := f.Get("subject_token_type"); tt != tokenTypeAccess && tt != "" {
			oauthError(w, http.StatusBadRequest, "invalid_request", "subject_token_type: want "+tokenTypeAccess+" (a Warden API key)")
			return
		}
		key = f.Get("subject_token")
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type: client_credentials or token exchange")
		return
	}
	if key == "" || strings.HasPrefix(key, TokenPrefix) {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "a Warden API key is required (not a token)")
		return
	}
	ident, err := g.cfg.Auth.Authenticate(r.Context(), "Bearer "+key)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			oauthError(w, http.StatusUnauthorized, "invalid_client", "the API key is not valid")
			return
		}
		g.log.Error("mcp gateway: token: authenticate", "err", err)
		oauthError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "cannot check credentials now")
		return
	}
	res := f["resource"]
	if len(res) != 1 {
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource: exactly one virtual server URL")
		return
	}
	prefix := strings.TrimSuffix(g.cfg.PublicURL, "/") + PathPrefix
	id, ok := strings.CutPrefix(strings.TrimSuffix(res[0], "/"), prefix)
	if !ok {
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource: not a virtual server URL of this wardend ("+prefix+"{server})")
		return
	}
	if _, ok := ServerID(PathPrefix + id); !ok {
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource: not a virtual server URL")
		return
	}
	if sc := f.Get("scope"); sc != "" && sc != string(ScopeUse) {
		oauthError(w, http.StatusBadRequest, "invalid_scope", "scope: only "+string(ScopeUse))
		return
	}
	if !ident.Has(ScopeUse) {
		oauthError(w, http.StatusBadRequest, "invalid_scope", "the key lacks the "+string(ScopeUse)+" scope")
		return
	}
	granted, err := g.granted(r.Context(), id, ident.Principal.ID)
	if err != nil {
		g.log.Error("mcp gateway: token: read grants", "err", err)
		oauthError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "cannot read grants now")
		return
	}
	if !granted {
		// Not granted and not there look the same.
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource: no such MCP server")
		return
	}
	now := g.cfg.Now()
	ttl := TokenTTL
	tok := g.signToken(tokenClaims{Sub: ident.Principal.ID, Kid: ident.Key.ID, Aud: g.serverURL(id),
		Iat: now.Unix(), Exp: now.Add(ttl).Unix()})
	g.auditEvent(r.Context(), govern.AuditEvent{Principal: ident.Principal.ID, Name: "mcp.token_issue",
		Target: "mcp:" + id, Outcome: govern.AuditSuccess, Detail: map[string]any{"key_id": ident.Key.ID,
			"audience": g.serverURL(id), "expires_in": int(ttl / time.Second)}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	out := map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(ttl / time.Second),
		"scope": string(ScopeUse)}
	if f.Get("grant_type") == grantTokenExchange {
		out["issued_token_type"] = tokenTypeAccess
	}
	json.NewEncoder(w).Encode(out)
}
