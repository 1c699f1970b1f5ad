package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// OAuth 2.1 for connectors through the real daemon (docs/mcp.md): a
// small authorization server (dynamic registration, PKCE S256 checked for
// real, resource indicators, refresh with rotation) protects a go-sdk MCP
// upstream; an agent starts the flow through the API, "opens" the URL,
// the authorization server sends it to wardend's callback, and its
// go-sdk client then calls the tool through the gateway: the upstream
// sees the access token, the client never does; a token the upstream
// stops accepting is refreshed and the call retried; a token about to
// expire is refreshed before it is sent.

type testAS struct {
	hs       *httptest.Server
	resource string
	mu       sync.Mutex
	clients  map[string]string // client_id -> redirect_uri
	codes    map[string]asCode
	access   map[string]time.Time // token -> expiry
	refresh  map[string]string    // refresh token -> client_id
	issued   []string
	lifetime time.Duration
	refreshN int
	n        int
}

type asCode struct{ client, redirect, challenge, resource string }

func newTestAS(t *testing.T) *testAS {
	as := &testAS{clients: map[string]string{}, codes: map[string]asCode{}, access: map[string]time.Time{},
		refresh: map[string]string{}, lifetime: time.Hour}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": as.hs.URL, "authorization_endpoint": as.hs.URL + "/authorize",
			"token_endpoint": as.hs.URL + "/token", "registration_endpoint": as.hs.URL + "/register",
			"code_challenge_methods_supported": []string{"S256"}, "response_types_supported": []string{"code"}})
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			RedirectURIs []string `json:"redirect_uris"`
		}
		if json.NewDecoder(r.Body).Decode(&m) != nil || len(m.RedirectURIs) != 1 {
			http.Error(w, `{"error":"invalid_client_metadata"}`, 400)
			return
		}
		as.mu.Lock()
		as.n++
		id := fmt.Sprintf("client-%d", as.n)
		as.clients[id] = m.RedirectURIs[0]
		as.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"client_id": id, "redirect_uris": m.RedirectURIs})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		as.mu.Lock()
		defer as.mu.Unlock()
		if as.clients[q.Get("client_id")] != q.Get("redirect_uri") || q.Get("response_type") != "code" ||
			q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") != as.resource {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, 400)
			return
		}
		as.n++
		code := fmt.Sprintf("code-%d", as.n)
		as.codes[code] = asCode{client: q.Get("client_id"), redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"), resource: q.Get("resource")}
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		as.mu.Lock()
		defer as.mu.Unlock()
		bad := func(e string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":%q}`, e)
		}
		if r.PostForm.Get("resource") != as.resource {
			bad("invalid_target")
			return
		}
		switch r.PostForm.Get("grant_type") {
		case "authorization_code":
			c, ok := as.codes[r.PostForm.Get("code")]
			delete(as.codes, r.PostForm.Get("code"))
			sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
			if !ok || c.client != r.PostForm.Get("client_id") || c.redirect != r.PostForm.Get("redirect_uri") ||
				base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
				bad("invalid_grant")
				return
			}
		case "refresh_token":
			rt := r.PostForm.Get("refresh_token")
			if cl, ok := as.refresh[rt]; !ok || cl != r.PostForm.Get("client_id") {
				bad("invalid_grant")
				return
			}
			delete(as.refresh, rt) // rotation: single use
			as.refreshN++
		default:
			bad("unsupported_grant_type")
			return
		}
		as.n++
		at, rt := fmt.Sprintf("it-access-%d-zq", as.n), fmt.Sprintf("it-refresh-%d-zq", as.n)
		as.access[at] = time.Now().Add(as.lifetime)
		as.refresh[rt] = r.PostForm.Get("client_id")
		as.issued = append(as.issued, at, rt)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": at, "token_type": "Bearer",
			"expires_in": int(as.lifetime / time.Second), "refresh_token": rt})
	})
	as.hs = httptest.NewServer(mux)
	t.Cleanup(as.hs.Close)
	return as
}

func (as *testAS) valid(tok string) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	exp, ok := as.access[tok]
	return ok && time.Now().Before(exp)
}

// oauthUpstream is a go-sdk MCP server that wants the AS's tokens.
type oauthUpstream struct {
	hs      *httptest.Server
	mu      sync.Mutex
	seen    []string
	refused int
}

func newOAuthUpstream(t *testing.T, as *testAS) *oauthUpstream {
	u := &oauthUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "it-oauth-upstream", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "whoami", Description: "Say who called.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "authorized call"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"resource": u.hs.URL + "/mcp", "authorization_servers": []string{as.hs.URL}})
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		u.mu.Lock()
		u.seen = append(u.seen, tok)
		ok := as.valid(tok)
		if !ok {
			u.refused++
		}
		u.mu.Unlock()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+u.hs.URL+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	u.hs = httptest.NewServer(mux)
	t.Cleanup(u.hs.Close)
	as.resource = u.hs.URL + "/mcp"
	return u
}

// recorder keeps every byte the MCP client receives.
type recorder struct {
	key string
	mu  sync.Mutex
	got bytes.Buffer
}

func (rc *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rc.key)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	rc.mu.Lock()
	for k, v := range resp.Header {
		fmt.Fprintf(&rc.got, "%s: %s\n", k, strings.Join(v, ","))
	}
	rc.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, writerFunc(func(p []byte) (int, error) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.got.Write(p)
	})), resp.Body}
	return resp, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestMCPGatewayOAuth(t *testing.T) {
	as := newTestAS(t)
	up := newOAuthUpstream(t, as)
	state, run := newDirs(t)
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	if err := os.WriteFile(conf, []byte("mcp:\n  allow_hosts: [\"127.0.0.1\"]\n  allow_http: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, run, "--config", conf)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "oauth-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "mcp", Scopes: []string{"mcp:use"}})
	if err != nil {
		t.Fatal(err)
	}
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "oa", "kind": "remote",
		"spec": map[string]any{"url": up.hs.URL + "/mcp", "oauth": map[string]any{}}})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "so",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "oa"}}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/so/grants/"+agent.ID, nil)

	// The agent starts the flow for itself; the answer is a URL to open.
	var start struct {
		AuthorizeURL string `json:"authorize_url"`
		RedirectURI  string `json:"redirect_uri"`
	}
	startBody := adminCall(t, d, ak.Key, "POST", "/v1/mcp/connectors/oa/oauth", map[string]any{})
	json.Unmarshal(startBody, &start)
	au, err := url.Parse(start.AuthorizeURL)
	if err != nil || !strings.HasPrefix(start.AuthorizeURL, as.hs.URL+"/authorize?") {
		t.Fatalf("authorize_url %q", start.AuthorizeURL)
	}
	q := au.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("resource") != up.hs.URL+"/mcp" || q.Get("state") == "" ||
		q.Get("redirect_uri") != d.url+"/mcp/oauth/callback" || q.Get("client_id") == "" {
		t.Fatalf("authorize_url query %v", q)
	}
	// The "browser": the AS redirects it to wardend's callback.
	resp, err := http.Get(start.AuthorizeURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "authorized") {
		t.Fatalf("callback: %d %s\n%s", resp.StatusCode, page, d.log)
	}
	// The state is single use.
	resp, err = http.Get(d.url + "/mcp/oauth/callback?" + url.Values{"state": {q.Get("state")}, "code": {"code-x"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("replayed callback: %d", resp.StatusCode)
	}

	rc := &recorder{key: ak.Key}
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp/v/so",
		HTTPClient: &http.Client{Transport: rc}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, d.log)
	}
	defer cs.Close()
	mcpTools(t, cs) // the gateway reads the upstream's list: whoami is pending
	if got := approvePending(t, d, "oa"); !slices.Equal(got, []string{"whoami"}) {
		t.Fatalf("pending: %v\n%s", got, d.log)
	}
	waitTools(t, cs, func(n []string) bool { return slices.Equal(n, []string{"whoami"}) })
	call := func(what string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		if err != nil || res.IsError || mcpText(res) != "authorized call" {
			t.Fatalf("%s: %v %+v %s\n%s", what, err, res, mcpText(res), d.log)
		}
	}
	call("first call")
	as.mu.Lock()
	first := as.issued[0]
	as.mu.Unlock()

	// The AS stops accepting the token: the upstream answers 401, the
	// gateway refreshes and retries, and the call works.
	as.mu.Lock()
	as.access[first] = time.Now().Add(-time.Second)
	as.lifetime = 30 * time.Second // under the gateway's one-minute margin
	as.mu.Unlock()
	call("call after the token was revoked")
	as.mu.Lock()
	n401, nref := up.refused, as.refreshN
	as.mu.Unlock()
	if nref != 1 || n401 == 0 {
		t.Fatalf("after a 401: %d refreshes, %d refusals", nref, n401)
	}
	// The new token expires within a minute: the next call refreshes it
	// before sending, without a 401.
	up.mu.Lock()
	refusedBefore := up.refused
	up.mu.Unlock()
	call("call with a token about to expire")
	as.mu.Lock()
	nref = as.refreshN
	as.mu.Unlock()
	up.mu.Lock()
	refusedAfter := up.refused
	up.mu.Unlock()
	if nref < 2 || refusedAfter != refusedBefore {
		t.Fatalf("proactive refresh: %d refreshes, refusals %d -> %d", nref, refusedBefore, refusedAfter)
	}

	// The tokens never reached the client, the API caller or the page.
	as.mu.Lock()
	issued := slices.Clone(as.issued)
	as.mu.Unlock()
	rc.mu.Lock()
	seen := rc.got.String()
	rc.mu.Unlock()
	creds := adminCall(t, d, d.adminKey, "GET", "/v1/audit?limit=1000", nil)
	for _, tok := range issued {
		for what, s := range map[string]string{"the MCP client": seen, "the start answer": string(startBody),
			"the callback page": string(page), "the audit log": string(creds)} {
			if strings.Contains(s, tok) {
				t.Fatalf("%s saw token %s", what, tok)
			}
		}
	}
	if !strings.Contains(string(creds), "mcp.oauth_authorize") || !strings.Contains(string(creds), "mcp.oauth_refresh") {
		t.Fatalf("audit lacks the oauth events")
	}
	up.mu.Lock()
	for _, s := range up.seen {
		if strings.Contains(s, ak.Key) || strings.HasPrefix(s, "wdn_") || strings.HasPrefix(s, "wmt_") {
			up.mu.Unlock()
			t.Fatalf("the upstream saw a Warden credential")
		}
	}
	up.mu.Unlock()

	t.Run("client authorization", func(t *testing.T) { testMCPClientAuthorization(t, d, agent.ID, ak) })
}

// testMCPClientAuthorization: the MCP authorization spec for clients on
// the same daemon: protected resource metadata and its 401 hint, tokens
// bound to one virtual server's URL, API keys still working.
func testMCPClientAuthorization(t *testing.T, d *daemon, agentID string, ak warden.CreatedKey) {
	ctx := context.Background()
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "so2",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "oa"}}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/so2/grants/"+agentID, nil)
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "not-granted",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "oa"}}}})
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(d.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(v) != nil {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	// Unauthenticated: 401 pointing at the resource metadata.
	resp, err := http.Post(d.url+"/mcp/v/so", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hint := `resource_metadata="` + d.url + `/.well-known/oauth-protected-resource/mcp/v/so"`
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), hint) {
		t.Fatalf("unauthenticated: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	get("/.well-known/oauth-protected-resource/mcp/v/so", &prm)
	if prm.Resource != d.url+"/mcp/v/so" || !slices.Equal(prm.AuthorizationServers, []string{d.url}) {
		t.Fatalf("resource metadata: %+v", prm)
	}
	var asm struct {
		Issuer        string   `json:"issuer"`
		TokenEndpoint string   `json:"token_endpoint"`
		Grants        []string `json:"grant_types_supported"`
	}
	get("/.well-known/oauth-authorization-server", &asm)
	if asm.Issuer != d.url || asm.TokenEndpoint != d.url+"/mcp/token" || !slices.Contains(asm.Grants, "client_credentials") {
		t.Fatalf("authorization server metadata: %+v", asm)
	}
	token := func(form url.Values) (int, map[string]any) {
		t.Helper()
		resp, err := http.PostForm(asm.TokenEndpoint, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	st, out := token(url.Values{"grant_type": {"client_credentials"}, "client_id": {"it"}, "client_secret": {ak.Key},
		"resource": {prm.Resource}})
	tok, _ := out["access_token"].(string)
	if st != 200 || !strings.HasPrefix(tok, "wmt_") || out["token_type"] != "Bearer" {
		t.Fatalf("token: %d %v", st, out)
	}
	if st, out := token(url.Values{"grant_type": {"client_credentials"}, "client_secret": {ak.Key},
		"resource": {d.url + "/mcp/v/not-granted"}}); st != 400 || out["error"] != "invalid_target" {
		t.Fatalf("token for a server not granted: %d %v", st, out)
	}
	if st, out := token(url.Values{"grant_type": {"client_credentials"}, "client_secret": {"wdn_bogus_key"},
		"resource": {prm.Resource}}); st != 401 || out["error"] != "invalid_client" {
		t.Fatalf("token for a bad key: %d %v", st, out)
	}
	st, out = token(url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {ak.Key},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}, "resource": {d.url + "/mcp/v/so2"}})
	tok2, _ := out["access_token"].(string)
	if st != 200 || !strings.HasPrefix(tok2, "wmt_") {
		t.Fatalf("token exchange: %d %v", st, out)
	}

	// The token works for its server, through the go-sdk client.
	cs := mcpConnect(t, d, tok, "so")
	waitTools(t, cs, func(n []string) bool { return slices.Equal(n, []string{"whoami"}) })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("call with a token: %v %+v", err, res)
	}
	// ... not for another server, nor for the API.
	status := func(path, bearer string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", d.url+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Authorization", "Bearer "+bearer)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
	}
	if st, wa := status("/mcp/v/so2", tok); st != 401 || !strings.Contains(wa, "invalid_token") {
		t.Fatalf("so's token at so2: %d %q", st, wa)
	}
	if st, _ := status("/mcp/v/so2", tok2); st != 200 {
		t.Fatalf("so2's token at so2: %d", st)
	}
	if st, _ := status("/mcp/v/so", ak.Key); st != 200 {
		t.Fatalf("the API key at so: %d", st)
	}
	req, _ := http.NewRequest("GET", d.url+"/v1/mcp/servers", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("the token at the API: %v %v", err, resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	// The stateless era's standard headers must match the body (-32020).
	req, _ = http.NewRequest("POST", d.url+"/mcp/v/so", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"whoami","arguments":{},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"it","version":"1"},`+
		`"io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Authorization", "Bearer "+ak.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/list")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	mism, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(mism), "-32020") {
		t.Fatalf("Mcp-Method mismatch: %d %s", resp.StatusCode, mism)
	}
	// A token dies with its key.
	if err := d.client(t, d.adminKey).RevokeKey(ctx, ak.APIKey.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := status("/mcp/v/so2", tok2); st != 401 {
		t.Fatalf("a revoked key's token: %d", st)
	}
}
