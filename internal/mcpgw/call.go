package mcpgw

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// A tools/call through a virtual server: the tool must be one the
// principal's server serves now (never trust the list the client saw);
// the call is an mcp.call action decided by the engine; the upstream is
// called with the connector's credential and a deadline; the result goes
// back as the upstream gave it; the audit event records the tool, the
// arguments' digest, the result's size, the duration and the decision.

// defaultCallTimeout bounds a call upstream when the connector sets none.
const defaultCallTimeout = 60 * time.Second

// progressRoute is where an upstream's progress notifications for one
// call go: the client's session and its own token.
type progressRoute struct {
	ctx     context.Context // the call's: its notifications go on its stream
	session *mcp.ServerSession
	token   any
}

func (g *Gateway) toolHandler(vs *vserver, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.call(ctx, vs, name, req)
	}
}

func newRequestID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "mcp_" + hex.EncodeToString(b)
}

func (g *Gateway) call(ctx context.Context, vs *vserver, name string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	start := g.cfg.Now()
	// The door authenticated this request's key and checked its scope and
	// grant; the session is pinned to its principal, the virtual
	// server's.
	c := &caller{ident: vs.identity(), vs: vs}
	if req.Extra != nil {
		c.authorization = req.Extra.Header.Get("Authorization")
	}
	if c.ident.Principal.ID != vs.principal {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no caller for this call"}
	}
	// The server's tools may have changed since the client listed them.
	if err := vs.sync(ctx, false); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the MCP server is not available"}
	}
	t := vs.lookup(name)
	if t == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
	}
	args := map[string]any{}
	raw := bytes.TrimSpace(req.Params.Arguments)
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "arguments must be a JSON object"}
		}
	}
	digest := ""
	if canon, err := Canonical(orEmptyObject(raw)); err == nil {
		sum := sha256.Sum256(canon)
		digest = hex.EncodeToString(sum[:])
	}
	p := c.ident.Principal
	a := &govern.Action{Kind: govern.KindMCPCall, Surface: govern.SurfaceMCP, RequestID: newRequestID(),
		Principal:  govern.Principal{ID: p.ID, Kind: p.Kind, Owner: p.CreatedBy},
		Credential: &govern.Checked{Identity: c.ident},
		MCP: &govern.MCPCall{Server: vs.id, Connector: t.connector, Tool: t.upstream, Name: name, Arguments: args,
			ArgsDigest: digest, ReadOnly: t.readOnly, DefHash: t.hash}}
	detail := map[string]any{"server": vs.id, "connector": t.connector, "tool": t.upstream, "name": name, "args_digest": digest}
	var governed []govern.Decided // the decided call, once the engine decided it
	finish := func(outcome string, res *mcp.CallToolResult, err error) {
		detail["duration_ms"] = g.cfg.Now().Sub(start).Milliseconds()
		if res != nil {
			if b, merr := json.Marshal(res); merr == nil {
				detail["result_bytes"] = len(b)
			}
			detail["is_error"] = res.IsError
			if len(res.InputRequests) > 0 {
				// The upstream asks the client first (relay.go).
				detail["input_requests"] = len(res.InputRequests)
			}
		}
		if len(req.Params.InputResponses) > 0 {
			detail["input_responses"] = len(req.Params.InputResponses)
		}
		if err != nil {
			detail["error"] = err.Error()
		}
		g.auditEvent(ctx, govern.AuditEvent{RequestID: a.RequestID, Principal: p.ID, Name: "mcp.call",
			Target: "mcp:" + vs.id + "/" + name, Outcome: outcome, Detail: detail, Governed: governed})
	}
	if eng := g.cfg.Govern; eng != nil {
		d, err := eng.Decide(ctx, a)
		governed = []govern.Decided{{Action: a, Decision: d}}
		if err != nil {
			finish(govern.AuditError, nil, err)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "cannot decide the call now"}
		}
		if err := d.Err(); err != nil {
			// The agent reads why, and for an approval, to retry the
			// identical call once it is approved.
			msg := "denied by policy"
			if _, m := errkind.Of(err); m != "" {
				msg = m
			}
			res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
			finish(govern.AuditDenied, res, nil)
			return res, nil
		}
	}
	// The engine's guard and middleware may have rewritten the arguments
	// (masked, modified): what goes upstream is what was decided.
	fwd := json.RawMessage(orEmptyObject(raw))
	if a.MCP.Arguments != nil && !sameArgs(raw, a.MCP.Arguments) {
		b, merr := json.Marshal(a.MCP.Arguments)
		if merr != nil {
			finish(govern.AuditError, nil, merr)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "cannot encode the arguments"}
		}
		fwd, args = b, a.MCP.Arguments
		detail["arguments_rewritten"] = true
	}
	uctx, span := startToolCall(ctx, vs.id, t) // trace.go
	res, err := g.callUpstream(uctx, vs, c, t, req, args, fwd)
	endToolCall(span, res, err)
	if err != nil {
		var werr *jsonrpc.Error
		if errors.As(err, &werr) {
			finish(govern.AuditError, nil, err)
			return nil, werr // the upstream's own error, as it gave it
		}
		g.log.Warn("mcp gateway: upstream call", "server", vs.id, "connector", t.connector, "tool", t.upstream, "err", err)
		res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "upstream " + t.connector + " failed: " + err.Error()}}}
		finish(govern.AuditError, res, err)
		return res, nil
	}
	if b, merr := json.Marshal(res); merr == nil && len(b) > g.cfg.MaxResultBytes {
		err := fmt.Errorf("the result is %d bytes, over the limit of %d", len(b), g.cfg.MaxResultBytes)
		res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "upstream " + t.connector + ": " + err.Error()}}}
		finish(govern.AuditError, res, err)
		return res, nil
	}
	if res, err = g.screenResult(ctx, a, t, res, &governed); err != nil {
		res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		finish(govern.AuditDenied, res, nil)
		return res, nil
	}
	outcome := govern.AuditSuccess
	if res.IsError {
		outcome = govern.AuditError
	}
	finish(outcome, res, nil)
	return res, nil
}

// sameArgs reports whether args are the arguments raw holds (nothing
// rewrote them).
func sameArgs(raw []byte, args map[string]any) bool {
	orig := map[string]any{}
	if err := json.Unmarshal(orEmptyObject(raw), &orig); err != nil {
		return false
	}
	return reflect.DeepEqual(orig, args)
}

// screenResult runs the engine's guard (Engine.Screen) and then the
// middleware post hooks (Config.PostResult) over a tool result: err (its
// text names the detector or the middleware, never a value) refuses the
// result; otherwise the result to forward, masked or modified. The
// screen's decision joins governed when it found something.
func (g *Gateway) screenResult(ctx context.Context, a *govern.Action, t *exposedTool, res *mcp.CallToolResult, governed *[]govern.Decided) (*mcp.CallToolResult, error) {
	eng, post := g.cfg.Govern, g.cfg.PostResult
	if eng == nil && post == nil {
		return res, nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, errors.New("the result cannot be encoded for screening")
	}
	changed := false
	if eng != nil {
		d, masked, err := eng.Screen(ctx, a, b)
		if len(d.Findings) > 0 || d.Outcome != govern.Allow || err != nil {
			*governed = append(*governed, govern.Decided{Action: a, Decision: d})
		}
		if err != nil {
			return nil, errors.New("the result could not be screened")
		}
		if derr := d.Err(); derr != nil {
			msg := "the result was refused by a guard"
			if _, m := errkind.Of(derr); m != "" {
				msg = m
			}
			return nil, errors.New(msg)
		}
		if masked != nil {
			b, changed = masked, true
		}
	}
	if post != nil {
		out, blocked, msg := post(ctx, a, b)
		if blocked {
			return nil, errors.New(msg)
		}
		if !bytes.Equal(out, b) {
			b, changed = out, true
		}
	}
	if !changed {
		return res, nil
	}
	var nr mcp.CallToolResult
	if err := json.Unmarshal(b, &nr); err != nil {
		g.log.Warn("mcp gateway: rewritten result is no tool result", "connector", t.connector, "tool", t.upstream, "err", err)
		return nil, errors.New("the rewritten result is not a tool result")
	}
	return &nr, nil
}

func orEmptyObject(raw []byte) []byte {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return []byte("{}")
	}
	return raw
}

// callUpstream calls the tool upstream with a deadline, forwarding
// progress notifications and (through ctx) cancellation.
func (g *Gateway) callUpstream(ctx context.Context, vs *vserver, c *caller, t *exposedTool, req *mcp.CallToolRequest, args map[string]any, fwd json.RawMessage) (*mcp.CallToolResult, error) {
	conn, err := g.connector(ctx, t.connector)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errors.New("the connector is gone")
		}
		return nil, err
	}
	timeout := defaultCallTimeout
	if spec, err := ParseConnectorSpec(conn.Kind, conn.Spec); err == nil {
		switch s := spec.(type) {
		case *RemoteSpec:
			if s.TimeoutSeconds > 0 {
				timeout = time.Duration(s.TimeoutSeconds) * time.Second
			}
		case *HostedSpec:
			if s.TimeoutSeconds > 0 {
				timeout = time.Duration(s.TimeoutSeconds) * time.Second
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if conn.Kind == store.MCPConnectorBuiltin {
		return g.callBuiltin(ctx, c, t.upstream, args)
	}
	b, err := g.cachedCredential(ctx, conn, vs.principal)
	if err != nil {
		return nil, err
	}
	// A retry after an input-required result carries the client's
	// answers and the upstream's state back (relay.go).
	params := &mcp.CallToolParams{Name: t.upstream, Arguments: fwd, InputResponses: req.Params.InputResponses,
		RequestState: req.Params.RequestState}
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		gt := "wgp-" + strconv.FormatUint(g.nextTok.Add(1), 10)
		g.mu.Lock()
		g.progress[gt] = &progressRoute{ctx: ctx, session: req.Session, token: tok}
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			delete(g.progress, gt)
			g.mu.Unlock()
		}()
		params.SetProgressToken(gt)
	}
	var res *mcp.CallToolResult
	err = g.withSession(ctx, conn, vs.principal, b, false, func(cs *mcp.ClientSession) error {
		var err error
		if m := upstreamMeta(ctx, conn, cs); m != nil {
			if params.Meta == nil {
				params.Meta = mcp.Meta{}
			}
			maps.Copy(params.Meta, m)
		}
		traceMeta(ctx, &params.Meta) // trace.go
		res, err = cs.CallTool(ctx, params)
		return err
	})
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("no answer within %s", timeout)
	}
	return res, err
}

// forwardProgress sends an upstream's progress notification to the client
// whose call it is about, with the client's token.
func (g *Gateway) forwardProgress(p *mcp.ProgressNotificationParams) {
	tok, ok := p.ProgressToken.(string)
	if !ok {
		return
	}
	g.mu.Lock()
	r := g.progress[tok]
	g.mu.Unlock()
	if r == nil {
		return
	}
	if err := r.session.NotifyProgress(r.ctx, &mcp.ProgressNotificationParams{ProgressToken: r.token,
		Progress: p.Progress, Total: p.Total, Message: p.Message}); err != nil {
		g.log.Debug("mcp gateway: forward progress", "err", err)
	}
}
