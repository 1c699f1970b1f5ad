package daemon

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/llmgw"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// Hosted-agent runs reach wardend from their sandbox (docs/agents.md):
// Warden's DNS answers network.LocalName in every sandbox with a network,
// and the sandbox's connections to it on port 80 end in wardend's own
// network stack, which hands them to localRoute. It serves the sandboxes
// of live runs only, and only the LLM gateway, the MCP gateway's virtual
// servers and a run's Slack reply: each request still authenticates with
// a key (the run's own, in $WARDEN_API_KEY).

// localURL is WARDEN_URL inside run sandboxes when the route exists.
const localURL = "http://" + network.LocalName

// localRoute serves the route; its server starts with the first
// connection.
type localRoute struct {
	d    *daemon
	once sync.Once
	ln   *connListener
	srv  *http.Server
}

type ctxSandboxKey struct{}

// serveLocal is the network's Local hook: it serves one connection from
// sandboxID and returns when it is closed.
func (d *daemon) serveLocal(sandboxID string, c net.Conn) {
	lr := &d.local
	if d.agents == nil {
		return
	}
	if _, ok := d.agents.RunForSandbox(sandboxID); !ok {
		return // the connection is closed by the caller: only live runs' sandboxes are served
	}
	lr.once.Do(func() {
		lr.d = d
		lr.ln = newConnListener()
		lr.srv = &http.Server{Handler: traceLocal(http.HandlerFunc(lr.serveHTTP)), ReadHeaderTimeout: 30 * time.Second,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if sc, ok := c.(*sandboxConn); ok {
					return context.WithValue(ctx, ctxSandboxKey{}, sc.sandbox)
				}
				return ctx
			}}
		go lr.srv.Serve(lr.ln)
	})
	if lr.ln == nil { // closed before it started
		return
	}
	sc := &sandboxConn{Conn: c, sandbox: sandboxID, done: make(chan struct{})}
	if !lr.ln.push(sc) {
		return
	}
	<-sc.done
}

// close stops the server (the connections close with it).
func (lr *localRoute) close() {
	lr.once.Do(func() {})
	if lr.srv != nil {
		lr.srv.Close()
		lr.ln.Close()
	}
}

func (lr *localRoute) serveHTTP(w http.ResponseWriter, r *http.Request) {
	d := lr.d
	sb, _ := r.Context().Value(ctxSandboxKey{}).(string)
	if _, ok := d.agents.RunForSandbox(sb); !ok {
		localError(w, http.StatusForbidden, "forbidden", "this sandbox's run has ended: Warden is served to live agent runs only")
		return
	}
	// The Host the sandbox sent means nothing here (it must not select,
	// say, a preview URL's routing in the API).
	r.Host = network.LocalName
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, llmgw.PathPrefix) && d.llm != nil:
		// The call's usage is the sandbox's: set from the connection,
		// which the sandbox cannot forge (a context value, no header).
		d.llm.ServeHTTP(w, r.WithContext(llmgw.WithSandbox(r.Context(), sb)))
	case strings.HasPrefix(p, mcpgw.PathPrefix) && d.mcp != nil:
		d.mcp.ServeHTTP(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/v1/agent-runs/") && strings.HasSuffix(p, "/reply") &&
		strings.Count(p, "/") == 4:
		d.srv.Handler().ServeHTTP(w, r)
	default:
		localError(w, http.StatusNotFound, "not_found", "runs reach Warden's LLM gateway ("+llmgw.PathPrefix+
			"...), MCP gateway ("+mcpgw.PathPrefix+"...) and POST /v1/agent-runs/{id}/reply only")
	}
}

func localError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

// sandboxConn is a connection from a sandbox; Close tells serveConn.
type sandboxConn struct {
	net.Conn
	sandbox string
	once    sync.Once
	done    chan struct{}
}

func (c *sandboxConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// connListener is a net.Listener fed by push.
type connListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener() *connListener {
	return &connListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(network.Gateway4.AsSlice()), Port: network.LocalPort}
}

// llmProviders are the first configured LLM provider of each kind: runs'
// OPENAI_BASE_URL and ANTHROPIC_BASE_URL.
func llmProviders(cfg config.LLMConfig) (openai, anthropic string) {
	for _, p := range cfg.Providers {
		switch {
		case p.Kind == "openai" && openai == "":
			openai = p.Name
		case p.Kind == "anthropic" && anthropic == "":
			anthropic = p.Name
		}
	}
	return openai, anthropic
}

// agentLLMBudgets is the LLM gateway's AgentBudgets: the budget a hosted
// agent's spec sets (llm_budget).
func (d *daemon) agentLLMBudgets(ctx context.Context, agent string) ([]config.LLMBudget, error) {
	if d.agents == nil {
		return nil, nil
	}
	return d.agents.LLMBudgets(ctx, agent)
}

// llmRunUsage is the LLM gateway's OnUsage: a call made with a run's key
// counts for the run.
func (d *daemon) llmRunUsage(ctx context.Context, ident auth.Identity, u store.LLMUsage) {
	if d.agents == nil || ident.Principal.Kind != store.PrincipalAgent {
		return
	}
	d.agents.AddRunUsage(ctx, ident.Key.ID, u.Calls, u.TokensIn, u.TokensOut, u.CostMicros)
}
