package mcpgw

import (
	"context"
	"errors"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/errkind"
)

// MemoryTools serves the builtin memory tools (*memory.Service): the
// calling identity's own memory, never another's. Its errors are the
// tool's error text (a guard's refusal names the detector).
type MemoryTools interface {
	CallTool(ctx context.Context, ident auth.Identity, name string, args map[string]any) (any, error)
}

// The memory tools (internal/memory's names; no run: Config.Memory serves
// them). A builtin connector offers them only when its spec lists them:
// {"tools": ["memory_remember", ...]}.
var memoryBuiltinTools = []builtinTool{
	{&mcp.Tool{Name: "memory_remember", Description: "Remember a note under a key in your own long-term memory " +
		"(a new version if the key exists). Memory outlives this run and sandbox; never store secrets.",
		InputSchema: schema(map[string]any{"key": strProp("A short name for the note, e.g. user/alice or runbook/deploy."),
			"text":  strProp("The note (up to 64 KiB)."),
			"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "Optional tags."},
			"scope": memoryScopeProp},
			"key", "text"), Annotations: destructive(false)}, nil},
	{&mcp.Tool{Name: "memory_recall", Description: "Search your memory by words (or fetch one key); best matches first.",
		InputSchema: schema(map[string]any{"query": strProp("Words to search for."), "key": strProp("Fetch this key instead."),
			"tag": strProp("Only notes with this tag."), "limit": intProp("At most this many (default 100)."), "scope": memoryScopeProp}),
		Annotations: readOnly}, nil},
	{&mcp.Tool{Name: "memory_list", Description: "List the notes in your memory (latest versions), by key.",
		InputSchema: schema(map[string]any{"prefix": strProp("Only keys starting with this."), "tag": strProp("Only notes with this tag."),
			"limit": intProp("At most this many (default 100)."), "scope": memoryScopeProp}), Annotations: readOnly}, nil},
	{&mcp.Tool{Name: "memory_forget", Description: "Forget a key of your memory (its history stays for review).",
		InputSchema: schema(map[string]any{"key": strProp("The key."), "scope": memoryScopeProp}, "key"), Annotations: destructive(true)}, nil},
}

// memoryScopeProp is the memory tools' scope argument (internal/memory's
// team.go): the agent's own memory or its team's.
var memoryScopeProp = map[string]any{"type": "string", "enum": []string{"agent", "team"},
	"description": "agent (default): your own memory; team: the memory shared by your team's agents (memory.team in your spec)."}

func init() { builtinTools = append(builtinTools, memoryBuiltinTools...) }

func isMemoryTool(name string) bool {
	return slices.ContainsFunc(memoryBuiltinTools, func(t builtinTool) bool { return t.tool.Name == name })
}

// callMemory runs a memory tool as the caller.
func (g *Gateway) callMemory(ctx context.Context, c *caller, name string, args map[string]any) (*mcp.CallToolResult, error) {
	if g.cfg.Memory == nil {
		return nil, errors.New("memory is not available on this daemon")
	}
	// The virtual server is per principal and holds its latest request's
	// identity; the call's own key names the run that writes (an agent's
	// concurrent runs each have a key), so it is read again here.
	ident := c.ident
	if c.authorization != "" {
		if id, err := g.cfg.Auth.Authenticate(ctx, c.authorization); err == nil && id.Principal.ID == ident.Principal.ID {
			ident = id
		}
	}
	out, err := g.cfg.Memory.CallTool(ctx, ident, name, args)
	if err != nil {
		msg := err.Error()
		if kind, m := errkind.Of(err); m != "" {
			msg = m
		} else if kind == errkind.Internal {
			g.log.Error("mcp gateway: memory tool", "tool", name, "err", err)
			msg = "memory failed"
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
	}
	return textResult(out)
}
