package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Pass-through of prompts, resources, resource templates, completions and
// resource subscriptions (docs/mcp.md): a virtual server serves what its
// connectors' upstreams offer, to the principals granted the server
// (the door checks the grant on every request). With one connector they
// are unchanged; with several, prompt names are prefixed as tool names
// are ("<prefix>__<prompt>"), and resource URIs and URI templates stay
// as they are, each routed to the connector that listed it; a URI (or
// template, or prompt name) two connectors list is withheld from both.
// Each prompts/get and resources/read is audited (mcp.prompt_get,
// mcp.resource_read). Prompts and resources are not pinned: their text
// reaches the client as the upstream gives it.

// maxUpstreamItems bounds the prompts, resources and templates read from
// one upstream (each).
const maxUpstreamItems = 1000

// readExtras reads an upstream's prompts, resources and resource
// templates into c, when its capabilities offer them. An upstream that
// offers a list and then fails to give it (a JSON-RPC error) serves its
// tools all the same; a broken connection fails the read.
func (g *Gateway) readExtras(ctx context.Context, conn store.MCPConnector, cs *mcp.ClientSession, c *catalog) error {
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil {
		c.caps = ir.Capabilities
	} else {
		c.caps = &mcp.ServerCapabilities{}
	}
	soft := func(what string, err error) error {
		var werr *jsonrpc.Error
		if errors.As(err, &werr) {
			g.log.Warn("mcp gateway: upstream list", "connector", conn.ID, "list", what, "err", err)
			return nil
		}
		return err
	}
	if c.caps.Prompts != nil {
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				c.prompts = nil
				if err := soft("prompts", err); err != nil {
					return err
				}
				break
			}
			if len(c.prompts) >= maxUpstreamItems {
				return fmt.Errorf("upstream lists over %d prompts", maxUpstreamItems)
			}
			c.prompts = append(c.prompts, p)
		}
	}
	if c.caps.Resources != nil {
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				c.resources = nil
				if err := soft("resources", err); err != nil {
					return err
				}
				break
			}
			if len(c.resources) >= maxUpstreamItems {
				return fmt.Errorf("upstream lists over %d resources", maxUpstreamItems)
			}
			c.resources = append(c.resources, r)
		}
		for t, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				c.templates = nil
				if err := soft("resource templates", err); err != nil {
					return err
				}
				break
			}
			if len(c.templates) >= maxUpstreamItems {
				return fmt.Errorf("upstream lists over %d resource templates", maxUpstreamItems)
			}
			c.templates = append(c.templates, t)
		}
	}
	return nil
}

// exposedPrompt is a prompt a virtual server serves.
type exposedPrompt struct {
	name      string // what the client calls it
	connector string
	upstream  string
	prompt    *mcp.Prompt
	fp        string
}

// exposedResource is a resource (or a resource template) a virtual
// server serves, under the URI (template) the upstream gave.
type exposedResource struct {
	key       string // the URI, or the URI template
	connector string
	res       *mcp.Resource
	tmpl      *mcp.ResourceTemplate
	match     *uritemplate.Template // tmpl's, parsed
	fp        string
}

// extras is what a virtual server serves besides tools.
type extras struct {
	prompts   map[string]*exposedPrompt
	resources map[string]*exposedResource
	templates map[string]*exposedResource
	collided  map[string]bool // "p\x00name", "r\x00uri", "t\x00template"
	// The upstreams whose prompts or resources are served offer these.
	completions map[string]bool // connector -> offers completion/complete
	subscribe   map[string]bool // connector -> offers resources/subscribe
	logging     map[string]bool // connector -> offers logging (for its tools too)
}

func newExtras() *extras {
	return &extras{prompts: map[string]*exposedPrompt{}, resources: map[string]*exposedResource{},
		templates: map[string]*exposedResource{}, collided: map[string]bool{},
		completions: map[string]bool{}, subscribe: map[string]bool{}, logging: map[string]bool{}}
}

func fingerprint(connector string, v any) string {
	b, _ := json.Marshal(v)
	return connector + "\x00" + string(b)
}

// add adds a connector's prompts, resources and templates; names and
// URIs another connector already gave are withheld from both.
func (ex *extras) add(log *slog.Logger, serverID, connector, prefix string, c *catalog) {
	if c == nil || c.caps == nil {
		return
	}
	if c.caps.Logging != nil {
		ex.logging[connector] = true
	}
	offered := false
	for _, p := range c.prompts {
		if p == nil || p.Name == "" {
			continue
		}
		name := exposedName(prefix, p.Name)
		served := *p
		served.Name = name
		ck := "p\x00" + name
		if _, dup := ex.prompts[name]; dup || ex.collided[ck] {
			log.Warn("mcp gateway: two prompts have one name; neither is served", "server", serverID, "prompt", name)
			delete(ex.prompts, name)
			ex.collided[ck] = true
			continue
		}
		ex.prompts[name] = &exposedPrompt{name: name, connector: connector, upstream: p.Name, prompt: &served,
			fp: fingerprint(connector, &served)}
		offered = true
	}
	for _, r := range c.resources {
		if r == nil || !absoluteURI(r.URI) {
			continue
		}
		ck := "r\x00" + r.URI
		if _, dup := ex.resources[r.URI]; dup || ex.collided[ck] {
			log.Warn("mcp gateway: two connectors list one resource URI; neither serves it", "server", serverID, "uri", r.URI)
			delete(ex.resources, r.URI)
			ex.collided[ck] = true
			continue
		}
		ex.resources[r.URI] = &exposedResource{key: r.URI, connector: connector, res: r, fp: fingerprint(connector, r)}
		offered = true
	}
	for _, t := range c.templates {
		if t == nil || !absoluteURI(t.URITemplate) {
			continue
		}
		m, err := uritemplate.New(t.URITemplate)
		if err != nil {
			log.Warn("mcp gateway: invalid resource URI template; not served", "server", serverID, "template", t.URITemplate)
			continue
		}
		ck := "t\x00" + t.URITemplate
		if _, dup := ex.templates[t.URITemplate]; dup || ex.collided[ck] {
			log.Warn("mcp gateway: two connectors list one resource template; neither serves it", "server", serverID, "template", t.URITemplate)
			delete(ex.templates, t.URITemplate)
			ex.collided[ck] = true
			continue
		}
		ex.templates[t.URITemplate] = &exposedResource{key: t.URITemplate, connector: connector, tmpl: t, match: m,
			fp: fingerprint(connector, t)}
		offered = true
	}
	if offered && c.caps.Completions != nil {
		ex.completions[connector] = true
	}
	if offered && c.caps.Resources != nil && c.caps.Resources.Subscribe {
		ex.subscribe[connector] = true
	}
}

// absoluteURI reports whether s parses as a URI with a scheme (what the
// go-sdk server requires of resources and templates).
func absoluteURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != ""
}

// syncExtras brings the server's prompts, resources and templates to
// want (vs.mu held). Adding and removing notifies the sessions with
// list_changed.
func (vs *vserver) syncExtras(want *extras) {
	cur := vs.extras
	var rmP, rmR, rmT []string
	for name, p := range cur.prompts {
		if w, ok := want.prompts[name]; !ok || w.fp != p.fp {
			rmP = append(rmP, name)
		}
	}
	for uri, r := range cur.resources {
		if w, ok := want.resources[uri]; !ok || w.fp != r.fp {
			rmR = append(rmR, uri)
		}
	}
	for tmpl, r := range cur.templates {
		if w, ok := want.templates[tmpl]; !ok || w.fp != r.fp {
			rmT = append(rmT, tmpl)
		}
	}
	if len(rmP) > 0 {
		vs.srv.RemovePrompts(rmP...)
	}
	if len(rmR) > 0 {
		vs.srv.RemoveResources(rmR...)
	}
	if len(rmT) > 0 {
		vs.srv.RemoveResourceTemplates(rmT...)
	}
	for _, name := range slices.Sorted(maps.Keys(want.prompts)) {
		if p, ok := cur.prompts[name]; ok && p.fp == want.prompts[name].fp {
			continue
		}
		vs.srv.AddPrompt(want.prompts[name].prompt, vs.getPrompt)
	}
	for _, uri := range slices.Sorted(maps.Keys(want.resources)) {
		if r, ok := cur.resources[uri]; ok && r.fp == want.resources[uri].fp {
			continue
		}
		vs.srv.AddResource(want.resources[uri].res, vs.readResource)
	}
	for _, tmpl := range slices.Sorted(maps.Keys(want.templates)) {
		if r, ok := cur.templates[tmpl]; ok && r.fp == want.templates[tmpl].fp {
			continue
		}
		vs.srv.AddResourceTemplate(want.templates[tmpl].tmpl, vs.readResource)
	}
	vs.extras = want
}

// routeURI returns the served resource or template a URI reads from.
func (vs *vserver) routeURI(uri string) *exposedResource {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.extras.route(uri)
}

func (ex *extras) route(uri string) *exposedResource {
	if r := ex.resources[uri]; r != nil {
		return r
	}
	for _, k := range slices.Sorted(maps.Keys(ex.templates)) {
		if t := ex.templates[k]; t.match.Regexp().MatchString(uri) {
			return t
		}
	}
	return nil
}

// trimCapabilities is the virtual server's receiving middleware: the
// capabilities it advertises (initialize, server/discover) offer
// completions and resource subscriptions only when an upstream whose
// prompts or resources it serves offers them.
func (vs *vserver) trimCapabilities(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		var caps *mcp.ServerCapabilities
		switch r := res.(type) {
		case *mcp.InitializeResult:
			caps = r.Capabilities
		case *mcp.DiscoverResult:
			caps = r.Capabilities
		}
		if caps != nil {
			vs.mu.Lock()
			completions, subscribe := len(vs.extras.completions) > 0, len(vs.extras.subscribe) > 0
			logging := len(vs.extras.logging) > 0
			vs.mu.Unlock()
			if !completions {
				caps.Completions = nil
			}
			if !logging {
				caps.Logging = nil
			}
			if caps.Resources != nil && !subscribe {
				r := *caps.Resources
				r.Subscribe = false
				caps.Resources = &r
			}
		}
		return res, err
	}
}

// upstreamDo runs fn with the principal's upstream session of a
// connector, under the connector's call deadline.
func (g *Gateway) upstreamDo(ctx context.Context, vs *vserver, connectorID string, fn func(context.Context, store.MCPConnector, *mcp.ClientSession) error) error {
	conn, err := g.connector(ctx, connectorID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errors.New("the connector is gone")
		}
		return err
	}
	if conn.Kind == store.MCPConnectorBuiltin {
		return errors.New("the builtin connector offers tools only")
	}
	timeout := connectorTimeout(conn)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := g.cachedCredential(ctx, conn, vs.principal)
	if err != nil {
		return err
	}
	err = g.withSession(ctx, conn, vs.principal, b, true, func(cs *mcp.ClientSession) error { return fn(ctx, conn, cs) })
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("no answer within %s", timeout)
	}
	return err
}

// connectorTimeout is the deadline of one call upstream.
func connectorTimeout(conn store.MCPConnector) time.Duration {
	if spec, err := ParseConnectorSpec(conn.Kind, conn.Spec); err == nil {
		switch s := spec.(type) {
		case *RemoteSpec:
			if s.TimeoutSeconds > 0 {
				return time.Duration(s.TimeoutSeconds) * time.Second
			}
		case *HostedSpec:
			if s.TimeoutSeconds > 0 {
				return time.Duration(s.TimeoutSeconds) * time.Second
			}
		}
	}
	return defaultCallTimeout
}

// upstreamError is what the client gets for a failed upstream request:
// the upstream's own JSON-RPC error as it gave it, or an internal error
// saying which connector failed.
func upstreamError(connector string, err error) error {
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return werr
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "upstream " + connector + " failed: " + err.Error()}
}

// auditRead records a prompts/get or resources/read.
func (g *Gateway) auditRead(ctx context.Context, vs *vserver, action, target, connector string, start time.Time, result any, err error) {
	detail := map[string]any{"server": vs.id, "connector": connector, "duration_ms": g.cfg.Now().Sub(start).Milliseconds()}
	outcome := govern.AuditSuccess
	if err != nil {
		outcome = govern.AuditError
		detail["error"] = err.Error()
	} else if b, merr := json.Marshal(result); merr == nil {
		detail["result_bytes"] = len(b)
	}
	g.auditEvent(ctx, govern.AuditEvent{RequestID: newRequestID(), Principal: vs.principal, Name: action,
		Target: "mcp:" + vs.id + "/" + target, Outcome: outcome, Detail: detail})
}

// checkSize refuses a result over MaxResultBytes.
func (g *Gateway) checkSize(connector string, v any) error {
	if b, err := json.Marshal(v); err == nil && len(b) > g.cfg.MaxResultBytes {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("upstream %s: the result is %d bytes, over the limit of %d", connector, len(b), g.cfg.MaxResultBytes)}
	}
	return nil
}

// getPrompt serves prompts/get from the prompt's upstream.
func (vs *vserver) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	g := vs.g
	start := g.cfg.Now()
	vs.mu.Lock()
	p := vs.extras.prompts[req.Params.Name]
	vs.mu.Unlock()
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", req.Params.Name)}
	}
	var res *mcp.GetPromptResult
	err := g.upstreamDo(ctx, vs, p.connector, func(ctx context.Context, conn store.MCPConnector, cs *mcp.ClientSession) error {
		var err error
		res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Meta: upstreamMeta(ctx, conn, cs), Name: p.upstream,
			Arguments: req.Params.Arguments, InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
		return err
	})
	if err == nil {
		err = g.checkSize(p.connector, res)
	}
	g.auditRead(ctx, vs, "mcp.prompt_get", p.name, p.connector, start, res, err)
	if err != nil {
		return nil, upstreamError(p.connector, err)
	}
	return res, nil
}

// readResource serves resources/read from the upstream that listed the
// resource (or the template it matches).
func (vs *vserver) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	g := vs.g
	start := g.cfg.Now()
	uri := req.Params.URI
	r := vs.routeURI(uri)
	if r == nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var res *mcp.ReadResourceResult
	err := g.upstreamDo(ctx, vs, r.connector, func(ctx context.Context, conn store.MCPConnector, cs *mcp.ClientSession) error {
		var err error
		res, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{Meta: upstreamMeta(ctx, conn, cs), URI: uri,
			InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
		return err
	})
	if err == nil {
		err = g.checkSize(r.connector, res)
	}
	g.auditRead(ctx, vs, "mcp.resource_read", uri, r.connector, start, res, err)
	if err != nil {
		return nil, upstreamError(r.connector, err)
	}
	return res, nil
}

// complete serves completion/complete from the upstream of the prompt or
// resource template the reference names.
func (vs *vserver) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ref := req.Params.Ref
	if ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "ref: required"}
	}
	// Built afresh: the client's _meta (its protocol version, among
	// others) is not the gateway's to send upstream.
	outRef := *ref
	out := mcp.CompleteParams{Argument: req.Params.Argument, Context: req.Params.Context, Ref: &outRef}
	connector := ""
	vs.mu.Lock()
	switch ref.Type {
	case "ref/prompt":
		if p := vs.extras.prompts[ref.Name]; p != nil {
			connector, outRef.Name = p.connector, p.upstream
		}
	case "ref/resource":
		if t := vs.extras.templates[ref.URI]; t != nil {
			connector = t.connector
		} else if r := vs.extras.resources[ref.URI]; r != nil {
			connector = r.connector
		}
	}
	offers := vs.extras.completions[connector]
	vs.mu.Unlock()
	if connector == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such prompt or resource template"}
	}
	if !offers {
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
	}
	var res *mcp.CompleteResult
	err := vs.g.upstreamDo(ctx, vs, connector, func(ctx context.Context, conn store.MCPConnector, cs *mcp.ClientSession) error {
		var err error
		res, err = cs.Complete(ctx, &out)
		return err
	})
	if err != nil {
		return nil, upstreamError(connector, err)
	}
	return res, nil
}

// subscribe forwards resources/subscribe to the resource's upstream; the
// go-sdk server then records the client's subscription, and the
// upstream's notifications/resources/updated reach the clients that
// subscribed (forwardResourceUpdated).
func (vs *vserver) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	r := vs.routeURI(req.Params.URI)
	if r == nil {
		return mcp.ResourceNotFoundError(req.Params.URI)
	}
	vs.mu.Lock()
	offers := vs.extras.subscribe[r.connector]
	vs.mu.Unlock()
	if !offers {
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the resource's upstream does not offer subscriptions"}
	}
	err := vs.g.upstreamDo(ctx, vs, r.connector, func(ctx context.Context, conn store.MCPConnector, cs *mcp.ClientSession) error {
		return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: req.Params.URI})
	})
	if err != nil {
		return upstreamError(r.connector, err)
	}
	return nil
}

// unsubscribe ends the client's subscription at the gateway. The
// upstream subscription, shared by every client on the same upstream
// session, stays until that session closes; updates for it reach only
// clients still subscribed.
func (vs *vserver) unsubscribe(context.Context, *mcp.UnsubscribeRequest) error {
	return nil
}

// forwardResourceUpdated tells the virtual servers that serve a
// connector's resource that it changed; the go-sdk server notifies the
// sessions that subscribed to it.
func (g *Gateway) forwardResourceUpdated(ctx context.Context, connectorID string, p *mcp.ResourceUpdatedNotificationParams) {
	if p == nil {
		return
	}
	g.mu.Lock()
	vss := slices.Collect(maps.Values(g.vservers))
	g.mu.Unlock()
	for _, vs := range vss {
		if r := vs.routeURI(p.URI); r == nil || r.connector != connectorID {
			continue
		}
		if err := vs.srv.ResourceUpdated(context.WithoutCancel(ctx), &mcp.ResourceUpdatedNotificationParams{URI: p.URI}); err != nil {
			g.log.Debug("mcp gateway: forward resource update", "server", vs.id, "err", err)
		}
	}
}
