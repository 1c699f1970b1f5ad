package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/version"
)

// A virtual server is one *mcp.Server per (server, principal): its tools
// are those of the server's connectors that its allow lists let through,
// whose current upstream definitions an admin approved. It is kept and
// brought up to date in place (AddTool and RemoveTools notify the
// sessions with list_changed), so a client's list changes only when the
// approved set does.

// exposedTool is one tool a virtual server serves.
type exposedTool struct {
	name      string // what the client calls it
	connector string
	kind      string // the connector's kind
	upstream  string // the upstream tool's name
	hash      string // of the approved definition
	readOnly  bool
	tool      *mcp.Tool // as served
	fp        string    // name, hash and the overrides: changes when the served tool does
}

type vserver struct {
	g         *Gateway
	id        string
	principal string
	srv       *mcp.Server

	mu       sync.Mutex
	ident    auth.Identity // of the latest request the door let in
	tools    map[string]*exposedTool
	extras   *extras // prompts, resources and templates served (passthrough.go)
	gen      uint64
	syncedAt time.Time
	syncErr  error
}

// virtualServer returns the principal's virtual server for id, brought
// up to date when its configuration may have changed.
func (g *Gateway) virtualServer(ctx context.Context, id string, ident auth.Identity) (*vserver, error) {
	key := id + "\x00" + ident.Principal.ID
	g.mu.Lock()
	vs := g.vservers[key]
	if vs == nil {
		vs = &vserver{g: g, id: id, principal: ident.Principal.ID, tools: map[string]*exposedTool{}, extras: newExtras()}
		vs.srv = mcp.NewServer(&mcp.Implementation{Name: "warden-mcp/" + id, Version: version.Version},
			&mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true},
				Logging: &mcp.LoggingCapabilities{}},
				CompletionHandler:  vs.complete,
				SubscribeHandler:   vs.subscribe,
				UnsubscribeHandler: vs.unsubscribe})
		// Prompts, resources, completions and subscriptions are advertised
		// only as far as the upstreams offer them.
		vs.srv.AddReceivingMiddleware(vs.trimCapabilities)
		// Log messages, sampling and elicitation reach the client session
		// they are for (relay.go).
		vs.srv.AddReceivingMiddleware(vs.relayMiddleware)
		g.vservers[key] = vs
	}
	g.mu.Unlock()
	vs.mu.Lock()
	vs.ident = ident
	vs.mu.Unlock()
	if err := vs.sync(ctx, false); err != nil {
		return nil, err
	}
	return vs, nil
}

func (vs *vserver) identity() auth.Identity {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.ident
}

// lookup returns the tool the client calls name, or nil.
func (vs *vserver) lookup(name string) *exposedTool {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.tools[name]
}

// sync brings the server's tools up to date if its configuration may have
// changed (force: now).
func (vs *vserver) sync(ctx context.Context, force bool) error {
	g := vs.g
	vs.mu.Lock()
	defer vs.mu.Unlock()
	gen := g.gen.Load()
	now := g.cfg.Now()
	if !force && !vs.syncedAt.IsZero() && gen == vs.gen && now.Sub(vs.syncedAt) < g.cfg.SyncInterval {
		return vs.syncErr
	}
	want, wantExtras, err := g.desiredTools(ctx, vs.id, vs.principal)
	vs.gen, vs.syncedAt, vs.syncErr = gen, now, err
	if err != nil {
		return err
	}
	vs.syncExtras(wantExtras)
	var remove []string
	for name, t := range vs.tools {
		if w, ok := want[name]; !ok || w.fp != t.fp {
			remove = append(remove, name)
			delete(vs.tools, name)
		}
	}
	if len(remove) > 0 {
		vs.srv.RemoveTools(remove...)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := vs.tools[name]; ok {
			continue
		}
		t := want[name]
		vs.tools[name] = t
		vs.srv.AddTool(t.tool, g.toolHandler(vs, name))
	}
	return nil
}

// desiredTools computes the tools a principal's virtual server serves,
// and its prompts, resources and resource templates.
func (g *Gateway) desiredTools(ctx context.Context, serverID, principal string) (map[string]*exposedTool, *extras, error) {
	rec, err := g.cfg.Store.GetMCPServer(ctx, serverID)
	if err != nil {
		return nil, nil, err
	}
	spec, err := ParseServerSpec(rec.Spec)
	if err != nil {
		return nil, nil, fmt.Errorf("server %s: %w", serverID, err)
	}
	ex := newExtras()
	out := map[string]*exposedTool{}
	collided := map[string]bool{}
	for i, sc := range spec.Connectors {
		conn, err := g.cfg.Store.GetConnector(ctx, sc.Connector)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				g.log.Warn("mcp gateway: a virtual server names a connector that does not exist", "server", serverID, "connector", sc.Connector)
				continue
			}
			return nil, nil, err
		}
		cat, err := g.upstreamCatalog(ctx, conn, principal)
		if err != nil {
			// One unreachable upstream does not take the others down.
			g.log.Warn("mcp gateway: list upstream tools", "server", serverID, "connector", conn.ID, "err", err)
			continue
		}
		tools, err := g.approvedTools(ctx, conn, cat.tools)
		if err != nil {
			g.log.Warn("mcp gateway: list upstream tools", "server", serverID, "connector", conn.ID, "err", err)
			continue
		}
		prefix := spec.prefixOf(i)
		ex.add(g.log, serverID, conn.ID, prefix, cat)
		rules := map[string]ToolRule{}
		for _, r := range sc.Tools {
			rules[r.Name] = r
		}
		for _, t := range tools {
			rule, listed := rules[t.tool.Name]
			if len(sc.Tools) > 0 && !listed {
				continue
			}
			readOnly := t.tool.Annotations != nil && t.tool.Annotations.ReadOnlyHint
			if sc.Preset == PresetReadOnly && !readOnly {
				continue
			}
			name := exposedName(prefix, toolRename(ToolRule{Name: t.tool.Name, Rename: rule.Rename}))
			if len(name) > MaxToolName || !toolNameRE.MatchString(name) {
				g.log.Warn("mcp gateway: tool name too long or invalid once prefixed; not served", "server", serverID, "tool", name)
				continue
			}
			served := *t.tool
			served.Name = name
			if rule.Description != "" {
				served.Description = rule.Description
			}
			if !validInputSchema(served.InputSchema) {
				g.log.Warn("mcp gateway: tool input schema is not an object schema; not served", "server", serverID, "tool", name)
				continue
			}
			if _, dup := out[name]; dup || collided[name] {
				// Two tools would answer to one name: neither is served.
				g.log.Warn("mcp gateway: two tools have one name; neither is served", "server", serverID, "tool", name)
				delete(out, name)
				collided[name] = true
				continue
			}
			out[name] = &exposedTool{name: name, connector: conn.ID, kind: conn.Kind, upstream: t.tool.Name, hash: t.hash,
				readOnly: readOnly, tool: &served, fp: name + "\x00" + t.hash + "\x00" + rule.Description + "\x00" + conn.Kind}
		}
	}
	return out, ex, nil
}

// validInputSchema reports whether s is a JSON object schema of type
// object (what the go-sdk requires of a tool).
func validInputSchema(s any) bool {
	b, err := json.Marshal(s)
	if err != nil {
		return false
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	return m["type"] == "object"
}

// approvedTool is an upstream tool whose current definition is approved.
type approvedTool struct {
	tool *mcp.Tool // the approved definition
	hash string
}

// approvedTools returns the connector's tools whose current upstream
// definition is approved, recording new and changed definitions as
// pending pins. Builtin tools are Warden's own and need no approval.
func (g *Gateway) approvedTools(ctx context.Context, conn store.MCPConnector, live []liveTool) ([]approvedTool, error) {
	var out []approvedTool
	for _, lt := range live {
		if conn.Kind == store.MCPConnectorBuiltin {
			out = append(out, approvedTool{tool: lt.tool, hash: lt.hash})
			continue
		}
		pin, err := g.cfg.Store.PutToolPin(ctx, store.MCPToolPin{Connector: conn.ID, Tool: lt.tool.Name, Hash: lt.hash,
			Definition: lt.def, State: store.MCPToolPending, FirstSeen: g.cfg.Now()})
		if err != nil {
			return nil, fmt.Errorf("record tool %s: %w", lt.tool.Name, err)
		}
		switch pin.State {
		case store.MCPToolApproved:
			t, err := toolFromDefinition(pin.Definition)
			if err != nil {
				g.log.Error("mcp gateway: stored tool definition", "connector", conn.ID, "tool", lt.tool.Name, "err", err)
				continue
			}
			out = append(out, approvedTool{tool: t, hash: pin.Hash})
		case store.MCPToolPending:
			g.noticePending(ctx, conn.ID, pin)
		}
	}
	return out, nil
}

// noticePending audits a pending definition once per daemon run:
// mcp.tool_changed when another definition of the tool was approved (a
// rug pull, or an update to review), mcp.tool_new otherwise.
func (g *Gateway) noticePending(ctx context.Context, connector string, pin store.MCPToolPin) {
	key := connector + "\x00" + pin.Tool + "\x00" + pin.Hash
	g.mu.Lock()
	seen := g.noticed[key]
	g.noticed[key] = true
	g.mu.Unlock()
	if seen {
		return
	}
	action := "mcp.tool_new"
	detail := map[string]any{"connector": connector, "tool": pin.Tool, "hash": pin.Hash}
	approved, err := g.cfg.Store.ListToolPins(ctx, store.MCPToolPinFilter{Connector: connector, Tool: pin.Tool,
		States: []string{store.MCPToolApproved}})
	if err == nil && len(approved) > 0 {
		action = "mcp.tool_changed"
		detail["approved_hash"] = approved[len(approved)-1].Hash
	}
	g.log.Info("mcp gateway: tool definition held for approval", "action", action, "connector", connector, "tool", pin.Tool, "hash", pin.Hash)
	g.auditEvent(ctx, govern.AuditEvent{Principal: "system", Name: action, Target: "mcp:" + connector + "/" + pin.Tool,
		Outcome: govern.AuditSuccess, Detail: detail})
}
