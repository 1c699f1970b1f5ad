package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// Agents' memory through the real daemon (docs/memory.md): an agent
// remembers through the MCP gateway's builtin memory tools with the go-sdk
// client and recalls in a later session; another agent cannot read it; a
// secret written to memory is blocked, then masked, per policy; a human
// reviews history and diff, redacts (the value leaves the store and its
// history, an audit event records the redaction) and exports.
func TestMemoryDaemon(t *testing.T) {
	const secret = "ghp_R8kQz2LmN4vX7bT1pW9sY3dF6hJ0cA5eG2uK"
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)

	keys := map[string]string{}
	ids := map[string]string{}
	for _, name := range []string{"mem-a", "mem-b"} {
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "mcp", Scopes: []string{"mcp:use"}})
		if err != nil {
			t.Fatal(err)
		}
		keys[name], ids[name] = k.Key, p.ID
	}
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "mem", "kind": "builtin",
		"spec": map[string]any{"tools": []string{"memory_remember", "memory_recall", "memory_list", "memory_forget"}}})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "memsrv",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "mem"}}}})
	for _, id := range ids {
		adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/memsrv/grants/"+id, nil)
	}

	call := func(cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v", tool, args, err)
		}
		return mcpText(res), res.IsError
	}

	// Session 1 of agent a: the tools, and a note remembered.
	s1 := mcpConnect(t, d, keys["mem-a"], "memsrv")
	if got, want := mcpTools(t, s1), []string{"memory_forget", "memory_list", "memory_recall", "memory_remember"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	if text, isErr := call(s1, "memory_remember", map[string]any{"key": "runbook/deploy", "text": "Deploys go through the canary first.",
		"tags": []string{"ops"}}); isErr || !strings.Contains(text, `"version":1`) {
		t.Fatalf("remember: %v %s", isErr, text)
	}
	s1.Close()

	// Session 2 of agent a recalls it.
	s2 := mcpConnect(t, d, keys["mem-a"], "memsrv")
	if text, isErr := call(s2, "memory_recall", map[string]any{"query": "how do deploys work? canary"}); isErr ||
		!strings.Contains(text, "Deploys go through the canary first.") || !strings.Contains(text, "runbook/deploy") {
		t.Fatalf("recall in a new session: %v %s", isErr, text)
	}
	// Agent b sees none of it.
	sb := mcpConnect(t, d, keys["mem-b"], "memsrv")
	for _, c := range []struct {
		tool string
		args map[string]any
	}{{"memory_recall", map[string]any{"query": "canary"}}, {"memory_list", nil}, {"memory_recall", map[string]any{"key": "runbook/deploy"}}} {
		if text, _ := call(sb, c.tool, c.args); strings.Contains(text, "canary") {
			t.Fatalf("agent b read a's memory with %s: %s", c.tool, text)
		}
	}
	if text, isErr := call(sb, "memory_forget", map[string]any{"key": "runbook/deploy"}); !isErr {
		t.Fatalf("agent b forgot a's key: %s", text)
	}
	// Nor through the API: memory:read is a human's scope.
	req, _ := http.NewRequest("GET", d.url+"/v1/agents/mem-a/memory", nil)
	req.Header.Set("Authorization", "Bearer "+keys["mem-b"])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("agent key on the memory API: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A secret: blocked by a guard on memory.write, naming the detector.
	pol := warden.PolicyWrite{ID: "memory-secrets", Scope: warden.PolicyScope{Kind: "installation"},
		Guard: &warden.PolicyGuard{Detectors: []string{"secrets"}, Targets: []string{"memory.write"}, Action: "block"}}
	if _, err := admin.CreatePolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	text, isErr := call(s2, "memory_remember", map[string]any{"key": "creds", "text": "the CI token is " + secret})
	if !isErr || !strings.Contains(text, "secrets detector") || strings.Contains(text, secret) {
		t.Fatalf("secret write: is_error %v %q", isErr, text)
	}
	// Masked instead: stored masked.
	pol.Guard.Action = "mask"
	if _, err := admin.UpdatePolicy(ctx, pol.ID, pol); err != nil {
		t.Fatal(err)
	}
	if text, isErr := call(s2, "memory_remember", map[string]any{"key": "creds", "text": "the CI token is " + secret}); isErr ||
		!strings.Contains(text, `"masked":true`) {
		t.Fatalf("masked write: %v %s", isErr, text)
	}
	if text, _ := call(s2, "memory_recall", map[string]any{"key": "creds"}); strings.Contains(text, secret) || !strings.Contains(text, "REDACTED") {
		t.Fatalf("masked memory reads %s", text)
	}

	// A second version, then review: history, diff.
	if _, isErr := call(s2, "memory_remember", map[string]any{"key": "runbook/deploy", "text": "Deploys go through staging, then the canary."}); isErr {
		t.Fatal("second version refused")
	}
	var entry struct {
		Entry    *struct{ Text string }
		Versions []struct {
			Version   int64
			Text      string
			Principal string `json:"principal_id"`
			Agent     string
			Redacted  *struct{ By, Reason string }
		}
	}
	json.Unmarshal(adminCall(t, d, d.adminKey, "GET", "/v1/agents/mem-a/memory/entry?key=runbook/deploy", nil), &entry)
	if len(entry.Versions) != 2 || entry.Versions[0].Principal != ids["mem-a"] || entry.Versions[1].Agent != "mem-a" || entry.Entry == nil {
		t.Fatalf("history = %+v", entry)
	}
	var diff struct{ Unified string }
	json.Unmarshal(adminCall(t, d, d.adminKey, "GET", "/v1/agents/mem-a/memory/diff?key=runbook/deploy", nil), &diff)
	if !strings.Contains(diff.Unified, "-Deploys go through the canary first.") || !strings.Contains(diff.Unified, "+Deploys go through staging, then the canary.") {
		t.Fatalf("diff = %q", diff.Unified)
	}

	// The CLI shows the same.
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := d.cli(t, "", args...)
		if code != 0 {
			t.Fatalf("warden %v: %d %s", args, code, errOut)
		}
		return out
	}
	if out := cli("memory", "ls", "mem-a"); !strings.Contains(out, "runbook/deploy") || !strings.Contains(out, "creds") {
		t.Fatalf("warden memory ls:\n%s", out)
	}
	if out := cli("memory", "ls", "mem-a", "--search", "staging"); !strings.Contains(out, "runbook/deploy") || strings.Contains(out, "creds") {
		t.Fatalf("warden memory ls --search:\n%s", out)
	}
	if out := cli("memory", "history", "mem-a", "runbook/deploy"); strings.Count(out, ids["mem-a"]) != 2 {
		t.Fatalf("warden memory history:\n%s", out)
	}
	if out := cli("memory", "diff", "mem-a", "runbook/deploy"); !strings.Contains(out, "+Deploys go through staging, then the canary.") {
		t.Fatalf("warden memory diff:\n%s", out)
	}
	if out := cli("memory", "redact", "mem-a", "creds", "--reason", "a token"); !strings.Contains(out, "redacted 1 version(s) of creds") {
		t.Fatalf("warden memory redact:\n%s", out)
	}

	// Redaction: gone from the entry, its history, search and the export;
	// the audit log says who did it.
	var red struct {
		Versions int `json:"versions_redacted"`
	}
	json.Unmarshal(adminCall(t, d, d.adminKey, "POST", "/v1/agents/mem-a/memory/redact",
		map[string]any{"key": "runbook/deploy", "reason": "wrong process"}), &red)
	if red.Versions != 2 {
		t.Fatalf("redacted %d versions", red.Versions)
	}
	json.Unmarshal(adminCall(t, d, d.adminKey, "GET", "/v1/agents/mem-a/memory/entry?key=runbook/deploy", nil), &entry)
	for _, v := range entry.Versions {
		if v.Text != "" || v.Redacted == nil || v.Redacted.Reason != "wrong process" {
			t.Fatalf("after redaction: %+v", v)
		}
	}
	if text, _ := call(s2, "memory_recall", map[string]any{"query": "canary staging"}); strings.Contains(text, "Deploys") {
		t.Fatalf("recall after redaction: %s", text)
	}
	req, _ = http.NewRequest("GET", d.url+"/v1/agents/mem-a/memory/export", nil)
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	export, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(export), "canary") || strings.Contains(string(export), secret) ||
		strings.Count(string(export), "\n") != 3 {
		t.Fatalf("export %d:\n%s", resp.StatusCode, export)
	}
	page, err := admin.ListAudit(ctx, warden.AuditQuery{Target: "memory:mem-a/runbook/deploy", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var redactions, writes int
	for _, e := range page.Events {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), "canary") {
			t.Fatalf("the audit log holds the text: %s", b)
		}
		switch e.Action {
		case "memory.redact":
			redactions++
		case "memory.write":
			writes++
		}
	}
	if redactions != 1 || writes != 2 {
		t.Fatalf("audit: %d redactions, %d writes: %+v", redactions, writes, page.Events)
	}
}
