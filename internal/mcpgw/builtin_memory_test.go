package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
)

// The memory tools are opt-in: a builtin connector without a tools list
// offers the sandbox tools only.
func TestBuiltinMemoryToolsOptIn(t *testing.T) {
	names := func(spec string) []string {
		t.Helper()
		ts, err := builtinCatalog(store.MCPConnector{ID: "b", Kind: store.MCPConnectorBuiltin, Spec: json.RawMessage(spec)})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range ts {
			out = append(out, tl.tool.Name)
		}
		return out
	}
	all := names(`{}`)
	if slices.ContainsFunc(all, isMemoryTool) || !slices.Contains(all, "sandbox_exec") {
		t.Fatalf("default builtin tools = %v", all)
	}
	mem := names(`{"tools":["memory_remember","memory_recall","sandbox_list"]}`)
	if !slices.Equal(mem, []string{"sandbox_list", "memory_remember", "memory_recall"}) {
		t.Fatalf("listed tools = %v", mem)
	}
	if _, err := ParseConnectorSpec(store.MCPConnectorBuiltin, json.RawMessage(`{"tools":["memory_forget","memory_list"]}`)); err != nil {
		t.Fatalf("memory tools refused in a builtin spec: %v", err)
	}
}

type fakeMemory struct {
	ident auth.Identity
	name  string
	args  map[string]any
	err   error
}

func (f *fakeMemory) CallTool(_ context.Context, ident auth.Identity, name string, args map[string]any) (any, error) {
	f.ident, f.name, f.args = ident, name, args
	if f.err != nil {
		return nil, f.err
	}
	return map[string]any{"key": args["key"], "version": 1}, nil
}

func TestCallMemory(t *testing.T) {
	c := &caller{ident: auth.Identity{Principal: store.Principal{ID: "prn_a", Kind: store.PrincipalAgent, Name: "a"}}}
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	if _, err := g.callMemory(t.Context(), c, "memory_list", nil); err == nil {
		t.Fatal("memory tools without a memory service")
	}
	f := &fakeMemory{}
	g.cfg.Memory = f
	res, err := g.callBuiltin(t.Context(), c, "memory_remember", map[string]any{"key": "k", "text": "v"})
	if err != nil || res.IsError || f.name != "memory_remember" || f.ident.Principal.ID != "prn_a" {
		t.Fatalf("remember = %+v, %v (memory saw %+v)", res, err, f)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, `"version":1`) {
		t.Fatalf("result = %+v", res.Content)
	}
	// The service's refusal is the tool's error; an internal one is not shown.
	f.err = errors.New("disk on fire at /var/lib/warden")
	res, err = g.callBuiltin(t.Context(), c, "memory_recall", map[string]any{"query": "x"})
	if err != nil || !res.IsError || strings.Contains(res.Content[0].(*mcp.TextContent).Text, "/var/lib") {
		t.Fatalf("internal error = %+v, %v", res, err)
	}
}
