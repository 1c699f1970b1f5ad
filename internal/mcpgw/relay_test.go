package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/store"
)

// Log messages, sampling and elicitation through the gateway (relay.go),
// with a session-era upstream (a stateful go-sdk handler: the gateway's
// client falls back to initialize) and a stateless-era one (input-required
// results), and clients of both eras.

// askUpstream serves the tool "ask": it logs at debug and info, then asks
// the client for a sample and an elicitation (as requests on a session-era
// session, as an input-required result on a stateless one) and answers
// what it got. It records what it saw.
type askUpstream struct {
	hs      *httptest.Server
	mu      sync.Mutex
	answers []string // "tag sampled=... elicited=..."
	caps    []string // "tag sampling=bool elicitation=bool"
}

func newAskUpstream(t *testing.T, stateless bool) *askUpstream {
	u := &askUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "ask", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}})
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object","properties":{"tag":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return u.ask(ctx, req)
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: stateless})
	u.hs = httptest.NewServer(h)
	t.Cleanup(func() {
		u.hs.CloseClientConnections()
		u.hs.Close()
	})
	return u
}

func (u *askUpstream) ask(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Tag string `json:"tag"`
	}
	json.Unmarshal(req.Params.Arguments, &a)
	ss := req.Session
	ip := ss.InitializeParams()
	caps := &mcp.ClientCapabilities{}
	if ip != nil && ip.Capabilities != nil {
		caps = ip.Capabilities
	}
	sampling, elicitation := caps.Sampling != nil, caps.Elicitation != nil
	if req.Params.RequestState == "" {
		ss.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Logger: "ask", Data: "debug " + a.Tag})
		ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "ask", Data: "info " + a.Tag})
		u.mu.Lock()
		u.caps = append(u.caps, fmt.Sprintf("%s sampling=%v elicitation=%v", a.Tag, sampling, elicitation))
		u.mu.Unlock()
	}
	sample := &mcp.CreateMessageParams{MaxTokens: 16, Messages: []*mcp.SamplingMessage{{Role: "user",
		Content: &mcp.TextContent{Text: "sample " + a.Tag}}}}
	elicit := &mcp.ElicitParams{Message: "elicit " + a.Tag, RequestedSchema: json.RawMessage(
		`{"type":"object","properties":{"answer":{"type":"string"}}}`)}
	var sampled, elicited string
	if ip != nil && ip.ProtocolVersion >= protocolStateless {
		if req.Params.RequestState == "" {
			ir := mcp.InputRequestMap{}
			if sampling {
				ir["s"] = sample
			}
			if elicitation {
				ir["e"] = elicit
			}
			if len(ir) == 0 {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the client cannot sample or elicit"}}}, nil
			}
			return &mcp.CallToolResult{InputRequests: ir, RequestState: "state-" + a.Tag}, nil
		}
		if req.Params.RequestState != "state-"+a.Tag {
			return nil, fmt.Errorf("request state %q for tag %q", req.Params.RequestState, a.Tag)
		}
		if r, ok := req.Params.InputResponses["s"].(*mcp.CreateMessageWithToolsResult); ok && len(r.Content) > 0 {
			if tc, ok := r.Content[0].(*mcp.TextContent); ok {
				sampled = tc.Text
			}
		}
		if r, ok := req.Params.InputResponses["e"].(*mcp.ElicitResult); ok {
			elicited = fmt.Sprint(r.Content["answer"])
		}
	} else {
		cm, err := ss.CreateMessage(ctx, sample)
		if err != nil {
			sampled = "error: " + err.Error()
		} else if tc, ok := cm.Content.(*mcp.TextContent); ok {
			sampled = tc.Text
		}
		er, err := ss.Elicit(ctx, elicit)
		if err != nil {
			elicited = "error: " + err.Error()
		} else {
			elicited = fmt.Sprint(er.Content["answer"])
		}
	}
	ans := fmt.Sprintf("%s sampled=%s elicited=%s", a.Tag, sampled, elicited)
	u.mu.Lock()
	u.answers = append(u.answers, ans)
	u.mu.Unlock()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: ans}}}, nil
}

func (u *askUpstream) seen() (answers, caps []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.answers...), append([]string(nil), u.caps...)
}

// askClient is a client that answers sampling and elicitation with its
// name, and records the log messages it gets.
type askClient struct {
	name string
	mu   sync.Mutex
	logs []string
}

func (c *askClient) options(interactive bool) *mcp.ClientOptions {
	o := &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
		c.mu.Lock()
		c.logs = append(c.logs, string(r.Params.Level)+":"+fmt.Sprint(r.Params.Data))
		c.mu.Unlock()
	}}
	if interactive {
		o.CreateMessageHandler = func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			in := ""
			if len(r.Params.Messages) > 0 {
				if tc, ok := r.Params.Messages[0].Content.(*mcp.TextContent); ok {
					in = tc.Text
				}
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m",
				Content: &mcp.TextContent{Text: c.name + "-model(" + strings.ReplaceAll(in, " ", "_") + ")"}}, nil
		}
		o.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": c.name + "-user(" + strings.ReplaceAll(r.Params.Message, " ", "_") + ")"}}, nil
		}
	}
	return o
}

func (c *askClient) gotLogs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.logs...)
}

// waitLogs waits until the client got a log message containing want.
func (c *askClient) waitLogs(t *testing.T, want string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs := c.gotLogs()
		for _, l := range logs {
			if strings.Contains(l, want) {
				return logs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log message with %q; got %q", c.name, want, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) addAskServer(t *testing.T, id string, u *askUpstream) {
	t.Helper()
	must(t, e.st.CreateConnector(context.Background(), store.MCPConnector{ID: id, Kind: store.MCPConnectorRemote,
		UpdatedAt: time.Now(), Spec: json.RawMessage(`{"url":"` + u.hs.URL + `"}`)}))
	e.addServer(t, id, `{"connectors":[{"connector":"`+id+`"}]}`, "agent-1", "agent-3")
}

func TestGatewayRelay(t *testing.T) {
	e := newEnv(t)
	upstreams := map[string]*askUpstream{"legacy": newAskUpstream(t, false), "modern": newAskUpstream(t, true)}
	for id, u := range upstreams {
		e.addAskServer(t, id, u)
	}
	// Approve the tools.
	for id := range upstreams {
		cs := e.connect(t, agentKey, id, "2025-11-25", nil)
		toolNames(t, cs)
	}
	e.approveAll(t)

	for _, upID := range []string{"legacy", "modern"} {
		up := upstreams[upID]
		t.Run(upID, func(t *testing.T) {
			// Session era: two principals at once, each with its own level.
			t.Run("session", func(t *testing.T) {
				alice, bob := &askClient{name: "alice"}, &askClient{name: "bob"}
				acs := e.connect(t, agentKey, upID, "2025-11-25", alice.options(true))
				bcs := e.connect(t, otherKey, upID, "2025-11-25", bob.options(true))
				if ir := acs.InitializeResult(); ir.Capabilities.Logging == nil {
					t.Fatalf("the server does not offer logging: %+v", ir.Capabilities)
				}
				must(t, acs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}))
				must(t, bcs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "debug"}))
				var wg sync.WaitGroup
				results := map[string]string{}
				var mu sync.Mutex
				for _, c := range []struct {
					cs  *mcp.ClientSession
					tag string
				}{{acs, upID + "-a1"}, {bcs, upID + "-b1"}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						defer cancel()
						res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"tag": c.tag}})
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							results[c.tag] = "error: " + err.Error()
							return
						}
						results[c.tag] = text(res)
					}()
				}
				wg.Wait()
				want := map[string]string{
					upID + "-a1": upID + "-a1 sampled=alice-model(sample_" + upID + "-a1) elicited=alice-user(elicit_" + upID + "-a1)",
					upID + "-b1": upID + "-b1 sampled=bob-model(sample_" + upID + "-b1) elicited=bob-user(elicit_" + upID + "-b1)",
				}
				for tag, w := range want {
					if results[tag] != w {
						t.Errorf("%s: got %q, want %q", tag, results[tag], w)
					}
				}
				answers, _ := up.seen()
				for _, w := range want {
					if !contains(answers, w) {
						t.Errorf("the upstream did not get %q: %q", w, answers)
					}
				}
				if upID == "legacy" {
					// The session-era upstream's requests went through the
					// relay sessions: audited, each for its principal.
					for _, action := range []string{"mcp.sampling", "mcp.elicitation"} {
						who := map[string]bool{}
						for _, ev := range e.audit.find(action) {
							who[ev.PrincipalID] = ev.Outcome == "success"
						}
						if !who["agent-1"] || !who["agent-3"] {
							t.Errorf("%s audit events: %v", action, who)
						}
					}
				}
				al := alice.waitLogs(t, "info "+upID+"-a1")
				bl := bob.waitLogs(t, "debug "+upID+"-b1")
				bob.waitLogs(t, "info "+upID+"-b1")
				for _, l := range al {
					if strings.Contains(l, "debug") || strings.Contains(l, "-b1") {
						t.Errorf("alice got %q", l)
					}
				}
				for _, l := range bl {
					if strings.Contains(l, "-a1") {
						t.Errorf("bob got %q", l)
					}
				}
				// The relay sessions end with their client sessions.
				if n := e.gw.relayCount(); n == 0 {
					t.Error("no relay sessions while the clients are connected")
				}
				acs.Close()
				bcs.Close()
				e.waitNoRelays(t)
			})
			// Stateless era: sampling and elicitation as input-required
			// results (the upstream must speak it too), logs at the
			// request's level.
			t.Run("stateless", func(t *testing.T) {
				carol := &askClient{name: "carol"}
				cs := e.connect(t, agentKey, upID, "", carol.options(true))
				params := &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"tag": upID + "-c1"},
					Meta: mcp.Meta{mcp.MetaKeyLogLevel: "info"}}
				res, err := cs.CallTool(context.Background(), params)
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range carol.waitLogs(t, "info "+upID+"-c1") {
					if strings.Contains(l, "debug") {
						t.Errorf("carol got %q", l)
					}
				}
				e.waitNoRelays(t) // a stateless request's end with it
				got := text(res)
				if upID == "modern" {
					w := "modern-c1 sampled=carol-model(sample_modern-c1) elicited=carol-user(elicit_modern-c1)"
					if got != w {
						t.Fatalf("got %q, want %q", got, w)
					}
				} else if !strings.Contains(got, "sampled=error") || !strings.Contains(got, "elicited=error") {
					// A session-era upstream's requests cannot reach a
					// stateless client: they fail, nothing hangs.
					t.Fatalf("got %q", got)
				}
			})
			// A client without sampling or elicitation: the upstream sees
			// neither capability; its requests fail at once.
			t.Run("no-capabilities", func(t *testing.T) {
				for _, era := range eras {
					dave := &askClient{name: "dave"}
					cs := e.connect(t, agentKey, upID, era, dave.options(false))
					tag := upID + "-d-" + eraName(era)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"tag": tag}})
					cancel()
					if err != nil {
						t.Fatalf("%s: %v", era, err)
					}
					_, caps := up.seen()
					if !contains(caps, tag+" sampling=false elicitation=false") {
						t.Errorf("%s: the upstream saw %q", era, caps)
					}
					if got := text(res); !strings.Contains(got, "error") && !res.IsError {
						t.Errorf("%s: got %q", era, got)
					}
				}
			})
		})
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// relayCount is the number of open relay sessions and links.
func (g *Gateway) relayCount() int {
	n := 0
	g.mu.Lock()
	for k := range g.sessions {
		if strings.Contains(k, "\x00c:") {
			n++
		}
	}
	g.mu.Unlock()
	g.relays.mu.Lock()
	n += len(g.relays.links)
	g.relays.mu.Unlock()
	return n
}

func (e *env) waitNoRelays(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.gw.relayCount() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d relay sessions and links left", e.gw.relayCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGatewayStatelessSubscribe: a stateless client subscribes with
// subscriptions/listen; the gateway subscribes upstream, and the
// upstream's update reaches the client on its listen stream.
func TestGatewayStatelessSubscribe(t *testing.T) {
	e := newEnv(t)
	rich := newRichUpstream(t, "a", "file:///shared.txt")
	e.addRemote(t, "rich", rich.hs.URL)
	e.addServer(t, "one", `{"connectors":[{"connector":"rich"}]}`, "agent-1")
	updated := make(chan string, 4)
	cs := e.connect(t, agentKey, "one", "", &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI }})
	if caps := cs.InitializeResult().Capabilities; caps.Resources == nil || !caps.Resources.Subscribe {
		t.Fatalf("capabilities = %+v, want resources.subscribe", caps.Resources)
	}
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "file:///shared.txt"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rich.mu.Lock()
		n := len(rich.subs)
		rich.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the upstream got no subscription")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rich.srv.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: "file:///shared.txt"})
	select {
	case uri := <-updated:
		if uri != "file:///shared.txt" {
			t.Fatalf("updated %q", uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no resources/updated notification reached the stateless client")
	}
}
