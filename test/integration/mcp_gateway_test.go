package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// The MCP gateway through the real daemon (docs/mcp.md): an admin
// registers a Go upstream MCP server as a remote connector with a shared
// credential, bundles it into a virtual server and grants it to an
// agent; the agent's go-sdk client sees nothing until the admin approves
// the tool's definition, then calls it; the upstream sees the connector's
// credential and never the agent's key; a policy rule denies a call; the
// builtin connector drives a sandbox as the agent.

type mcpUpstream struct {
	hs    *httptest.Server
	mu    sync.Mutex
	auths []string
}

func newMCPUpstream(t *testing.T) *mcpUpstream {
	u := &mcpUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "it-upstream", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", Description: "Echo the text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(req.Params.Arguments)}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	u.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.hs.Close)
	return u
}

// adminCall is a JSON call of the native API.
func adminCall(t *testing.T, d *daemon, key, method, path string, body any) []byte {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
	}
	return out
}

type keyAuth struct{ key string }

func (k keyAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(t *testing.T, d *daemon, key, server string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp/v/" + server,
		HTTPClient: &http.Client{Transport: keyAuth{key}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp/v/%s: %v\n%s", server, err, d.log)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func mcpTools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}

func mcpText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPGatewayDaemon(t *testing.T) {
	up := newMCPUpstream(t)
	state, run := newDirs(t)
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	// The upstream is on loopback over http: an admin's exception.
	if err := os.WriteFile(conf, []byte("mcp:\n  allow_hosts: [\"127.0.0.1\"]\n  allow_http: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, run, "--config", conf)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)

	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "mcp-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "mcp",
		Scopes: []string{"mcp:use", "sandboxes:create", "sandboxes:read", "sandboxes:exec", "sandboxes:delete", "files:read", "files:write"}})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := admin.PutSecret(ctx, "upstream-token", "it-upstream-token")
	if err != nil {
		t.Fatal(err)
	}
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "up", "kind": "remote",
		"spec": map[string]any{"url": up.hs.URL, "auth": map[string]any{"required": true}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/connectors/up/credentials", map[string]any{"secret_id": sec.ID, "shared": true})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "s1",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "up", "tools": []any{map[string]any{"name": "echo"}}}}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/s1/grants/"+agent.ID, nil)

	cs := mcpConnect(t, d, ak.Key, "s1")
	if got := mcpTools(t, cs); len(got) != 0 {
		t.Fatalf("tools before approval: %v", got)
	}
	var pending struct {
		Tools []struct{ Connector, Tool, Hash, State string } `json:"tools"`
	}
	json.Unmarshal(adminCall(t, d, d.adminKey, "GET", "/v1/mcp/tools?state=pending", nil), &pending)
	if len(pending.Tools) != 1 || pending.Tools[0].Tool != "echo" {
		t.Fatalf("pending tools: %+v", pending.Tools)
	}
	p := pending.Tools[0]
	adminCall(t, d, d.adminKey, "POST", fmt.Sprintf("/v1/mcp/tools/%s/%s/%s/approve", p.Connector, p.Tool, p.Hash), nil)
	deadline := time.Now().Add(15 * time.Second)
	for !slices.Equal(mcpTools(t, cs), []string{"echo"}) {
		if time.Now().After(deadline) {
			t.Fatalf("echo not served after approval: %v", mcpTools(t, cs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "through the gateway"}})
	if err != nil || res.IsError || !strings.Contains(mcpText(res), "through the gateway") {
		t.Fatalf("echo: %v %+v", err, res)
	}
	up.mu.Lock()
	auths := slices.Clone(up.auths)
	up.mu.Unlock()
	for _, a := range auths {
		if a != "Bearer it-upstream-token" || strings.Contains(a, ak.Key) {
			t.Fatalf("the upstream saw Authorization %q", a)
		}
	}

	// A rule denies the call; the refusal is the tool's error.
	if _, err := admin.CreatePolicy(ctx, warden.PolicyWrite{ID: "no-mcp-echo", Scope: warden.PolicyScope{Kind: "installation"},
		Rules: []warden.Rule{{ID: "no-echo", Kinds: []string{"mcp.call"}, When: `mcp.tool == "echo"`, Outcome: "deny", Message: "no echo today"}}}); err != nil {
		t.Fatal(err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "again"}})
	if err != nil || !res.IsError || !strings.Contains(mcpText(res), "no echo today") {
		t.Fatalf("denied echo: %v %+v", err, res)
	}
	page, err := admin.ListAudit(ctx, warden.AuditQuery{Principal: agent.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range page.Events {
		if e.Action == "mcp.call" {
			outcomes = append(outcomes, e.Outcome)
		}
	}
	if !slices.Contains(outcomes, "success") || !slices.Contains(outcomes, "denied") {
		t.Fatalf("mcp.call audit outcomes: %v", outcomes)
	}

	// The builtin connector: sandboxes as the agent.
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "warden", "kind": "builtin", "spec": map[string]any{}})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "sb",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "warden"}}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/sb/grants/"+agent.ID, nil)
	bs := mcpConnect(t, d, ak.Key, "sb")
	if got := mcpTools(t, bs); !slices.Contains(got, "sandbox_exec") || !slices.Contains(got, "sandbox_create") {
		t.Fatalf("builtin tools: %v", got)
	}
	res, err = bs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_create: %v %s", err, mcpText(res))
	}
	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	json.Unmarshal([]byte(mcpText(res)), &created)
	sb, err := admin.GetSandbox(ctx, created.SandboxID)
	if err != nil || sb.Owner != agent.ID {
		t.Fatalf("the builtin sandbox: %v owner %q, want %q", err, sb.Owner, agent.ID)
	}
	res, err = bs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox_id": created.SandboxID,
		"command": "echo from-mcp-$((40+2))"}})
	if err != nil || res.IsError || !strings.Contains(mcpText(res), "from-mcp-42") {
		t.Fatalf("sandbox_exec: %v %s", err, mcpText(res))
	}
	res, err = bs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_kill", Arguments: map[string]any{"sandbox_id": created.SandboxID}})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_kill: %v %s", err, mcpText(res))
	}
}
