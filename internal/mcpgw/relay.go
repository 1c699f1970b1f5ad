package mcpgw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Relay: what an upstream says to a client besides answers and progress
// (log messages, and sampling and elicitation requests sent as requests
// by a session-era upstream) reaches the one client session it is for.
//
// An upstream session is shared by every principal using the same
// credential, and nothing in a log message or an upstream request says
// which call it belongs to. So a client session that can take them (it
// advertised sampling or elicitation, or set a log level) gets upstream
// sessions of its own, relay sessions, opened on its first request to
// each connector and closed when the client session ends. A relay
// session advertises to the upstream only what its client advertised,
// and hands the upstream's log messages and requests to that client
// session alone. A stateless (2026-07-28) client has no session: a
// request that asks for log messages (its _meta log level) gets relay
// sessions for that request only, for remote connectors (a hosted one
// would start a server process per request).
//
// Sampling and elicitation of the stateless era (an upstream's
// input-required result, SEP-2322) need no relay: the gateway's upstream
// clients do not answer them themselves; the result goes to the client as
// the upstream gave it (a session-era client is asked by the go-sdk
// server on the gateway's side), and the client's answers (inputResponses
// and requestState of its retry) go upstream with the retried request. On
// such an upstream each request carries the client's own sampling and
// elicitation capabilities, and its log level when it has relay sessions.

// protocolStateless is the first protocol revision without sessions.
const protocolStateless = "2026-07-28"

// maxRelayLinks bounds the client sessions of one principal that hold
// relay sessions at once; beyond it a client session uses the shared
// upstream sessions (its upstreams' log messages do not reach it, and a
// session-era upstream's sampling or elicitation request is refused).
const maxRelayLinks = 32

// link is one client session's relay state (for a stateless client, one
// request's).
type link struct {
	g         *Gateway
	id        string
	principal string
	server    string // the virtual server's ID
	ss        *mcp.ServerSession
	stateless bool
	caps      *mcp.ClientCapabilities // the client's sampling and elicitation

	mu       sync.Mutex
	level    mcp.LoggingLevel
	active   map[uint64]context.Context // requests being served (their contexts)
	nextReq  uint64
	sessions map[string]*upstreamSession // relay sessions, by g.sessions key
	closed   bool
}

// relayState is the gateway's links (Gateway.relays).
type relayState struct {
	mu     sync.Mutex
	links  map[*mcp.ServerSession]*link
	counts map[string]int // principal -> session-era links
	next   uint64
}

type linkKey struct{}
type clientSessionKey struct{}

// linkFrom returns the link whose relay sessions a request uses (nil:
// the shared sessions).
func linkFrom(ctx context.Context) *link {
	l, _ := ctx.Value(linkKey{}).(*link)
	return l
}

// clientSessionFrom returns the client session a request came on.
func clientSessionFrom(ctx context.Context) *mcp.ServerSession {
	ss, _ := ctx.Value(clientSessionKey{}).(*mcp.ServerSession)
	return ss
}

// withoutLink makes requests under ctx use the shared upstream sessions
// (reading lists is not a client's own traffic).
func withoutLink(ctx context.Context) context.Context {
	if linkFrom(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, linkKey{}, (*link)(nil))
}

// relayedMethods are the client requests that may go upstream.
var relayedMethods = map[string]bool{"tools/call": true, "prompts/get": true, "resources/read": true,
	"completion/complete": true, "resources/subscribe": true}

// relayMiddleware is the virtual server's receiving middleware that ties
// a request to its client session (and relay link) and records the
// session's log level.
func (vs *vserver) relayMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if ss == nil {
			return next(ctx, method, req)
		}
		if method == "logging/setLevel" {
			res, err := next(ctx, method, req)
			if p, ok := req.GetParams().(*mcp.SetLoggingLevelParams); err == nil && ok && p != nil {
				vs.g.setClientLevel(ctx, vs, ss, p.Level)
			}
			return res, err
		}
		if !relayedMethods[method] {
			return next(ctx, method, req)
		}
		ctx = context.WithValue(ctx, clientSessionKey{}, ss)
		l, release := vs.g.linkFor(vs, ss, req)
		if l == nil {
			return next(ctx, method, req)
		}
		ctx = context.WithValue(ctx, linkKey{}, l)
		end := l.begin(ctx)
		defer func() {
			end()
			release()
		}()
		return next(ctx, method, req)
	}
}

// stateless reports whether a client session speaks the stateless era.
func statelessClient(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.ProtocolVersion >= protocolStateless
}

// relayCaps is what of a client's capabilities the gateway passes on
// upstream: sampling and elicitation (nil: neither).
func relayCaps(ss *mcp.ServerSession) *mcp.ClientCapabilities {
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || (ip.Capabilities.Sampling == nil && ip.Capabilities.Elicitation == nil) {
		return nil
	}
	return &mcp.ClientCapabilities{Sampling: ip.Capabilities.Sampling, Elicitation: ip.Capabilities.Elicitation}
}

// linkFor returns the link a request of ss uses, and what to call when the
// request is done; nil when the request uses the shared sessions.
func (g *Gateway) linkFor(vs *vserver, ss *mcp.ServerSession, req mcp.Request) (*link, func()) {
	var l *link
	if statelessClient(ss) {
		level := requestLogLevel(req)
		if level == "" {
			return nil, nil
		}
		g.relays.mu.Lock()
		g.relays.next++
		id := g.relays.next
		g.relays.mu.Unlock()
		l = &link{g: g, id: "r" + strconv.FormatUint(id, 10), principal: vs.principal, server: vs.id, ss: ss, stateless: true, level: level,
			active: map[uint64]context.Context{}, sessions: map[string]*upstreamSession{}}
		// Closed after the answer: closing waits for the upstream.
		return l, func() { go l.close() }
	}
	g.relays.mu.Lock()
	l = g.relays.links[ss]
	g.relays.mu.Unlock()
	if l == nil {
		if relayCaps(ss) == nil {
			return nil, nil // no level set, no sampling or elicitation: nothing to relay
		}
		if l = g.newLink(vs, ss); l == nil {
			return nil, nil
		}
	}
	return l, func() {}
}

// requestLogLevel is the log level a stateless request asks for (its
// _meta), or "".
func requestLogLevel(req mcp.Request) mcp.LoggingLevel {
	p := req.GetParams()
	if p == nil {
		return ""
	}
	m := p.GetMeta()
	if m == nil {
		return ""
	}
	s, _ := m[mcp.MetaKeyLogLevel].(string)
	return mcp.LoggingLevel(s)
}

// newLink makes a session-era client session's link (nil: the principal
// holds maxRelayLinks already). It is closed, with its relay sessions,
// when the client session ends.
func (g *Gateway) newLink(vs *vserver, ss *mcp.ServerSession) *link {
	g.relays.mu.Lock()
	if l := g.relays.links[ss]; l != nil {
		g.relays.mu.Unlock()
		return l
	}
	if g.relays.links == nil {
		g.relays.links = map[*mcp.ServerSession]*link{}
		g.relays.counts = map[string]int{}
	}
	if g.relays.counts[vs.principal] >= maxRelayLinks {
		g.relays.mu.Unlock()
		g.log.Warn("mcp gateway: too many client sessions with relay sessions; this one uses the shared upstream sessions",
			"principal", vs.principal, "limit", maxRelayLinks)
		return nil
	}
	g.relays.next++
	l := &link{g: g, id: "s" + strconv.FormatUint(g.relays.next, 10), principal: vs.principal, server: vs.id, ss: ss,
		caps: relayCaps(ss), active: map[uint64]context.Context{}, sessions: map[string]*upstreamSession{}}
	g.relays.links[ss] = l
	g.relays.counts[vs.principal]++
	g.relays.mu.Unlock()
	go func() {
		ss.Wait()
		g.relays.mu.Lock()
		if g.relays.links[ss] == l {
			delete(g.relays.links, ss)
			if g.relays.counts[l.principal]--; g.relays.counts[l.principal] <= 0 {
				delete(g.relays.counts, l.principal)
			}
		}
		g.relays.mu.Unlock()
		l.close()
	}()
	return l
}

// setClientLevel records a session-era client's log level and sets it on
// its relay sessions whose upstream speaks the session era (a stateless
// upstream gets the level with each request).
func (g *Gateway) setClientLevel(ctx context.Context, vs *vserver, ss *mcp.ServerSession, level mcp.LoggingLevel) {
	if statelessClient(ss) {
		return
	}
	vs.mu.Lock()
	logging := len(vs.extras.logging) > 0
	vs.mu.Unlock()
	if !logging {
		return // no upstream of the server logs
	}
	l := g.newLink(vs, ss)
	if l == nil {
		return
	}
	l.mu.Lock()
	l.level = level
	var sess []*upstreamSession
	for _, s := range l.sessions {
		sess = append(sess, s)
	}
	l.mu.Unlock()
	for _, s := range sess {
		s.mu.Lock()
		cs := s.cs
		s.mu.Unlock()
		if cs != nil {
			l.applyLevel(ctx, cs)
		}
	}
}

// applyLevel sets the client's log level on a session-era relay session
// whose upstream offers logging.
func (l *link) applyLevel(ctx context.Context, cs *mcp.ClientSession) {
	l.mu.Lock()
	level := l.level
	l.mu.Unlock()
	ir := cs.InitializeResult()
	if level == "" || ir == nil || ir.ProtocolVersion >= protocolStateless || ir.Capabilities == nil || ir.Capabilities.Logging == nil {
		return
	}
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
		l.g.log.Debug("mcp gateway: set upstream log level", "err", err)
	}
}

// begin records a request being served under the link (its context
// carries the client's stream and, stateless, its log level); the
// returned func ends it.
func (l *link) begin(ctx context.Context) func() {
	l.mu.Lock()
	l.nextReq++
	n := l.nextReq
	l.active[n] = ctx
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.active, n)
		l.mu.Unlock()
	}
}

// clientCtx is the context to send a message to the client with: the
// latest request being served (its notifications and requests go on that
// request's stream), else one of the session's own.
func (l *link) clientCtx() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best uint64
	var ctx context.Context
	for n, c := range l.active {
		if c.Err() == nil && n >= best {
			best, ctx = n, c
		}
	}
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// adopt records a relay session opened for the link; false when the link
// closed meanwhile (the caller closes the session).
func (l *link) adopt(s *upstreamSession) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.sessions[s.key] = s
	return true
}

// close closes the link's relay sessions.
func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	sess := l.sessions
	l.sessions = map[string]*upstreamSession{}
	l.mu.Unlock()
	g := l.g
	g.mu.Lock()
	for k, s := range sess {
		if g.sessions[k] == s {
			delete(g.sessions, k)
		}
	}
	g.mu.Unlock()
	for _, s := range sess {
		s.close()
	}
}

// relayKey is the suffix of a relay session's key in g.sessions.
func (l *link) relayKey() string { return "\x00c:" + l.id }

// sessionLink returns the link whose relay session a request to conn
// opens, or nil (the shared session): builtin connectors have no
// upstream session, and a stateless request's hosted connector would
// start a server process for one request.
func sessionLink(ctx context.Context, conn store.MCPConnector) *link {
	l := linkFrom(ctx)
	if l == nil || conn.Kind == store.MCPConnectorBuiltin || (l.stateless && conn.Kind != store.MCPConnectorRemote) {
		return nil
	}
	return l
}

// clientOptions are the options of the gateway's client of an upstream:
// for a relay session (l not nil) with its client's sampling and
// elicitation capabilities and handlers, and its log messages going to
// that client; for a shared session with neither (a session-era
// upstream's sampling or elicitation request is refused, its log
// messages dropped). The gateway never answers an upstream's
// input-required result itself: it goes to the client.
func (g *Gateway) clientOptions(conn store.MCPConnector, l *link, tapped bool, base *mcp.ClientOptions) *mcp.ClientOptions {
	o := *base
	o.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	o.Capabilities = &mcp.ClientCapabilities{}
	if l == nil {
		return &o
	}
	// The shared session reads the lists and hears of their changes.
	o.ToolListChangedHandler, o.PromptListChangedHandler, o.ResourceListChangedHandler = nil, nil, nil
	ss := l.ss
	if !tapped { // else logTap forwards them
		o.LoggingMessageHandler = func(_ context.Context, req *mcp.LoggingMessageRequest) {
			if req.Params != nil {
				l.forwardLog(req.Params)
			}
		}
	}
	if l.caps == nil || l.stateless {
		return &o
	}
	if s := l.caps.Sampling; s != nil {
		o.Capabilities.Sampling = s
		if s.Tools != nil {
			o.CreateMessageWithToolsHandler = func(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
				cctx, stop := l.relayCtx(ctx)
				defer stop()
				start := g.cfg.Now()
				res, err := ss.CreateMessageWithTools(cctx, req.Params)
				g.auditRelayed(cctx, l, conn.ID, "mcp.sampling", start, err)
				return res, err
			}
		} else {
			o.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				cctx, stop := l.relayCtx(ctx)
				defer stop()
				start := g.cfg.Now()
				res, err := ss.CreateMessage(cctx, req.Params)
				g.auditRelayed(cctx, l, conn.ID, "mcp.sampling", start, err)
				return res, err
			}
		}
	}
	if e := l.caps.Elicitation; e != nil {
		o.Capabilities.Elicitation = e
		o.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if req.Params == nil {
				return nil, errors.New("elicitation: no parameters")
			}
			cctx, stop := l.relayCtx(ctx)
			defer stop()
			start := g.cfg.Now()
			res, err := ss.Elicit(cctx, req.Params)
			g.auditRelayed(cctx, l, conn.ID, "mcp.elicitation", start, err)
			return res, err
		}
		o.ElicitationCompleteHandler = func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			if req.Params != nil {
				ss.NotifyElicitationComplete(l.clientCtx(), req.Params)
			}
		}
	}
	return &o
}

// auditRelayed records a sampling or elicitation request an upstream sent
// the client through a relay session (not its content).
func (g *Gateway) auditRelayed(ctx context.Context, l *link, connector, action string, start time.Time, err error) {
	detail := map[string]any{"server": l.server, "connector": connector, "duration_ms": g.cfg.Now().Sub(start).Milliseconds()}
	outcome := govern.AuditSuccess
	if err != nil {
		outcome = govern.AuditError
		detail["error"] = err.Error()
	}
	g.auditEvent(context.WithoutCancel(ctx), govern.AuditEvent{RequestID: newRequestID(), Principal: l.principal, Name: action,
		Target: "mcp:" + l.server, Outcome: outcome, Detail: detail})
}

// relayCtx is the context of a request relayed to the client: it goes on
// the stream of the client's request being served, and ends when either
// that request or the upstream's request does.
func (l *link) relayCtx(upstream context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(l.clientCtx())
	stop := context.AfterFunc(upstream, cancel)
	return cctx, func() { stop(); cancel() }
}

// upstreamMeta is the _meta of a request to a stateless-era upstream
// session: the client's own sampling and elicitation capabilities (none
// when it has none), and its log level when the session is its relay
// session. A session-era upstream gets none (it read them at initialize).
func upstreamMeta(ctx context.Context, conn store.MCPConnector, cs *mcp.ClientSession) mcp.Meta {
	ir := cs.InitializeResult()
	if ir == nil || ir.ProtocolVersion < protocolStateless {
		return nil
	}
	// Not *mcp.ClientCapabilities: it always encodes "roots".
	var caps struct {
		Sampling    *mcp.SamplingCapabilities    `json:"sampling,omitempty"`
		Elicitation *mcp.ElicitationCapabilities `json:"elicitation,omitempty"`
	}
	if ss := clientSessionFrom(ctx); ss != nil {
		if c := relayCaps(ss); c != nil {
			caps.Sampling, caps.Elicitation = c.Sampling, c.Elicitation
		}
	}
	m := mcp.Meta{mcp.MetaKeyClientCapabilities: caps}
	// cs is the link's relay session exactly when sessionLink chose one
	// (session opens a relay session for it or fails).
	if l := sessionLink(ctx, conn); l != nil {
		l.mu.Lock()
		level := l.level
		l.mu.Unlock()
		if level != "" {
			m[mcp.MetaKeyLogLevel] = string(level)
		}
	}
	return m
}

// A go-sdk client hands notifications to its handlers on another
// goroutine than the one that reads answers, so a log message the
// upstream sent before a call's result may be handled after the call
// returned: too late for a stateless client, whose request (and stream)
// ended with it. So a relay session to a remote upstream takes log
// messages from the HTTP response streams as they are read, before
// anything after them: logTap.

// maxTapEvent bounds one server-sent event the tap holds to read it
// (beyond it the event passes unread; the go-sdk client refuses it).
const maxTapEvent = 8 << 20

// logTap is the relay session's HTTP transport: it forwards the
// notifications/message events of every event stream to the link.
type logTap struct {
	base http.RoundTripper
	l    *link
}

func (t *logTap) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	resp.Body = &sseTap{rc: resp.Body, br: bufio.NewReader(resp.Body), l: t.l}
	return resp, nil
}

// tapTransport returns tr with its HTTP client's transport wrapped in a
// logTap, when it is a streamable HTTP transport (else nil).
func tapTransport(tr mcp.Transport, l *link) mcp.Transport {
	st, ok := tr.(*mcp.StreamableClientTransport)
	if !ok || st.HTTPClient == nil {
		return nil
	}
	hc := *st.HTTPClient
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &logTap{base: base, l: l}
	nt := *st
	nt.HTTPClient = &hc
	return &nt
}

// sseTap reads an event stream event by event, passing each on
// unchanged once it has looked at it.
type sseTap struct {
	rc    io.ReadCloser
	br    *bufio.Reader
	l     *link
	event []byte
	out   []byte
	err   error
	big   bool // the event is over maxTapEvent: pass it on unread
}

func (s *sseTap) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		line, err := s.br.ReadBytes('\n')
		s.event = append(s.event, line...)
		if err != nil {
			s.err = err
			s.out, s.event = s.event, nil
			break
		}
		end := len(bytes.TrimRight(line, "\r\n")) == 0
		if !end && len(s.event) < maxTapEvent && !s.big {
			continue
		}
		if end && !s.big {
			s.inspect(s.event)
		}
		s.big = !end
		s.out, s.event = s.event, nil
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *sseTap) Close() error { return s.rc.Close() }

// inspect forwards an event that is a log message.
func (s *sseTap) inspect(event []byte) {
	var data []byte
	for _, line := range bytes.Split(event, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
		}
	}
	if !bytes.Contains(data, []byte(`"notifications/message"`)) {
		return
	}
	var msg struct {
		ID     json.RawMessage           `json:"id"`
		Method string                    `json:"method"`
		Params *mcp.LoggingMessageParams `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Method != "notifications/message" || len(msg.ID) > 0 || msg.Params == nil {
		return
	}
	s.l.forwardLog(msg.Params)
}

// forwardLog sends an upstream's log message to the link's client (ss.Log
// applies the client's level: the session's, or a stateless request's).
func (l *link) forwardLog(p *mcp.LoggingMessageParams) {
	if err := l.ss.Log(l.clientCtx(), p); err != nil {
		l.g.log.Debug("mcp gateway: forward log message", "err", err)
	}
}
