package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestMCPConnectorAdd: the shortcut flags become the kind's spec, --spec
// is read as YAML or JSON, and bad combinations are usage errors.
func TestMCPConnectorAdd(t *testing.T) {
	d := newFakeDaemon(t)
	var got []warden.MCPConnectorWrite
	d.handle("POST /v1/mcp/connectors", func(w http.ResponseWriter, r *http.Request) {
		var q warden.MCPConnectorWrite
		json.NewDecoder(r.Body).Decode(&q)
		got = append(got, q)
		writeJSON(w, 201, warden.MCPConnector{ID: q.ID, Kind: q.Kind, Spec: q.Spec})
	})
	if res := run(t, d, "mcp", "connector", "add", "github", "https://mcp.example.com/mcp", "--header", "X-Token"); res.code != 0 || res.stdout != "github\n" {
		t.Fatalf("add remote: %+v", res)
	}
	if res := run(t, d, "mcp", "connector", "add", "fs", "--kind", "hosted", "--command", "npx,-y,server-fs", "--template", "node"); res.code != 0 {
		t.Fatalf("add hosted: %+v", res)
	}
	if res := run(t, d, "mcp", "connector", "add", "box", "--kind", "builtin"); res.code != 0 {
		t.Fatalf("add builtin: %+v", res)
	}
	if res := runIn(t, d, "url: https://x.example.com/mcp\ntransport: sse\n", "mcp", "connector", "add", "legacy", "--spec", "-", "--description", "old"); res.code != 0 {
		t.Fatalf("add with a YAML spec on stdin: %+v", res)
	}
	want := []struct{ id, kind, spec string }{
		{"github", "remote", `{"auth":{"header":"X-Token","scheme":""},"url":"https://mcp.example.com/mcp"}`},
		{"fs", "hosted", `{"command":["npx","-y","server-fs"],"template":"node"}`},
		{"box", "builtin", `{}`},
		{"legacy", "remote", `{"transport":"sse","url":"https://x.example.com/mcp"}`},
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].ID != w.id || got[i].Kind != w.kind || string(got[i].Spec) != w.spec {
			t.Errorf("request %d: %+v spec %s, want %+v", i, got[i], got[i].Spec, w)
		}
	}
	if got[3].Description != "old" {
		t.Errorf("description: %+v", got[3])
	}
	for _, args := range [][]string{
		{"mcp", "connector", "add", "x"},                              // remote without a URL
		{"mcp", "connector", "add", "x", "--kind", "hosted"},          // hosted without --command
		{"mcp", "connector", "add", "x", "--kind", "ftp"},             // no such kind
		{"mcp", "connector", "add", "x", "https://a", "--spec", "{}"}, // both
		{"mcp", "connector", "add"},                                   // no ID
	} {
		if res := run(t, d, args...); res.code != 2 {
			t.Errorf("%v: %+v, want a usage error", args, res)
		}
	}
	if len(got) != 4 {
		t.Errorf("a refused command reached the daemon: %d requests", len(got))
	}
}

func TestMCPConnectorLsRmTools(t *testing.T) {
	d := newFakeDaemon(t)
	d.json("GET /v1/mcp/connectors", 200, map[string]any{"connectors": []warden.MCPConnector{
		{ID: "github", Kind: "remote", Spec: json.RawMessage(`{"url":"https://mcp.example.com/mcp"}`), OwnerID: "pr-1", CreatedAt: testNow},
		{ID: "fs", Kind: "hosted", Spec: json.RawMessage(`{"command":["npx","-y","fs"]}`), OwnerID: "pr-1", CreatedAt: testNow},
	}})
	res := run(t, d, "mcp", "connector", "ls")
	if res.code != 0 || !strings.Contains(res.stdout, "https://mcp.example.com/mcp") || !strings.Contains(res.stdout, "npx -y fs") {
		t.Errorf("ls: %+v", res)
	}
	d.handle("DELETE /v1/mcp/connectors/github", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	d.apiError("DELETE /v1/mcp/connectors/used", 409, "conflict", "mcp connector used: used by virtual server dev")
	if res := run(t, d, "mcp", "connector", "rm", "github"); res.code != 0 || res.stdout != "github\n" {
		t.Errorf("rm: %+v", res)
	}
	if res := run(t, d, "mcp", "connector", "rm", "used"); res.code == 0 || !strings.Contains(res.stderr, "virtual server dev") {
		t.Errorf("rm of a used connector: %+v", res)
	}
	d.json("GET /v1/mcp/tools", 200, map[string]any{"tools": []warden.MCPTool{
		{Connector: "github", Tool: "search", Hash: "abc123", State: "pending", Definition: json.RawMessage(`{"description":"Search\ncode"}`), FirstSeen: testNow},
	}})
	res = run(t, d, "mcp", "connector", "tools", "github", "--state", "pending")
	if res.code != 0 || !strings.Contains(res.stdout, "abc123") || !strings.Contains(res.stdout, "Search code") {
		t.Errorf("connector tools: %+v", res)
	}
	if res := run(t, d, "mcp", "connector", "tools", "github", "--state", "maybe"); res.code != 2 {
		t.Errorf("bad --state: %+v", res)
	}
	reqs := d.requests()
	if last := reqs[len(reqs)-1]; last != "GET /v1/mcp/tools?connector=github&state=pending" {
		t.Errorf("tools request %q", last)
	}
}

func TestMCPServerCommands(t *testing.T) {
	d := newFakeDaemon(t)
	var spec json.RawMessage
	d.handle("POST /v1/mcp/servers", func(w http.ResponseWriter, r *http.Request) {
		var q warden.MCPServerWrite
		json.NewDecoder(r.Body).Decode(&q)
		spec = q.Spec
		writeJSON(w, 201, warden.MCPServer{ID: q.ID, Path: "/mcp/v/" + q.ID})
	})
	if res := run(t, d, "mcp", "server", "create", "dev", "--connector", "github,box", "--read-only"); res.code != 0 || res.stdout != "dev\n" {
		t.Fatalf("create: %+v", res)
	}
	if string(spec) != `{"connectors":[{"connector":"github","preset":"read-only"},{"connector":"box","preset":"read-only"}]}` {
		t.Errorf("spec %s", spec)
	}
	if res := run(t, d, "mcp", "server", "create", "dev"); res.code != 2 {
		t.Errorf("create without connectors: %+v", res)
	}

	var granted []string
	d.handle("PUT /v1/mcp/servers/dev/grants/{p}", func(w http.ResponseWriter, r *http.Request) {
		granted = append(granted, r.PathValue("p"))
		writeJSON(w, 200, warden.MCPGrant{ServerID: "dev", PrincipalID: r.PathValue("p")})
	})
	d.json("GET /v1/principals", 200, map[string]any{"principals": []warden.Principal{{ID: "pr-bot", Name: "ci-bot"}}})
	if res := run(t, d, "mcp", "server", "grant", "dev", "pr-alice", "ci-bot"); res.code != 0 || res.stdout != "pr-alice\npr-bot\n" {
		t.Errorf("grant: %+v", res)
	}
	if strings.Join(granted, " ") != "pr-alice pr-bot" {
		t.Errorf("granted %v", granted)
	}
	d.handle("DELETE /v1/mcp/servers/dev/grants/pr-alice", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	if res := run(t, d, "mcp", "server", "revoke", "dev", "pr-alice"); res.code != 0 || res.stdout != "pr-alice\n" {
		t.Errorf("revoke: %+v", res)
	}
	if res := run(t, d, "mcp", "server", "revoke", "dev"); res.code != 2 {
		t.Errorf("revoke without a principal: %+v", res)
	}

	d.json("GET /v1/mcp/servers/dev", 200, warden.MCPServer{ID: "dev", Path: "/mcp/v/dev"})
	d.apiError("GET /v1/mcp/servers/nope", 404, "not_found", "mcp server nope not found")
	if res := run(t, d, "mcp", "server", "url", "dev"); res.code != 0 || res.stdout != d.srv.URL+"/mcp/v/dev\n" {
		t.Errorf("url: %+v, want %s/mcp/v/dev", res, d.srv.URL)
	}
	if res := run(t, d, "mcp", "server", "url", "nope"); res.code == 0 || res.stdout != "" {
		t.Errorf("url of a missing server: %+v", res)
	}
	d.json("GET /v1/mcp/servers", 200, map[string]any{"servers": []warden.MCPServer{{ID: "dev", Connectors: []string{"github", "box"}, Path: "/mcp/v/dev", CreatedAt: testNow}}})
	if res := run(t, d, "mcp", "server", "ls"); res.code != 0 || !strings.Contains(res.stdout, "github,box") || !strings.Contains(res.stdout, "/mcp/v/dev") {
		t.Errorf("ls: %+v", res)
	}
}

func TestMCPToolsCommands(t *testing.T) {
	d := newFakeDaemon(t)
	d.json("GET /v1/mcp/tools", 200, map[string]any{"tools": []warden.MCPTool{{Connector: "github", Tool: "search", Hash: "abc", State: "pending", FirstSeen: testNow}}})
	if res := run(t, d, "mcp", "tools", "pending", "--connector", "github"); res.code != 0 || !strings.Contains(res.stdout, "abc") {
		t.Errorf("pending: %+v", res)
	}
	if reqs := d.requests(); reqs[0] != "GET /v1/mcp/tools?connector=github&state=pending" {
		t.Errorf("pending request %q", reqs[0])
	}
	for _, op := range []string{"approve", "reject"} {
		state := map[string]string{"approve": "approved", "reject": "rejected"}[op]
		d.handle("POST /v1/mcp/tools/github/search/abc/"+op, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			writeJSON(w, 200, warden.MCPTool{Connector: "github", Tool: "search", Hash: "abc", State: state})
		})
		if res := run(t, d, "mcp", "tools", op, "github", "search", "abc"); res.code != 0 || res.stdout != "github/search abc "+state+"\n" {
			t.Errorf("%s: %+v", op, res)
		}
		if res := run(t, d, "mcp", "tools", op, "github", "search"); res.code != 2 {
			t.Errorf("%s without a hash: %+v", op, res)
		}
	}
}
