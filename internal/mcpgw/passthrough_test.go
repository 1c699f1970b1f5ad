package mcpgw

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/store"
)

// Pass-through of prompts, resources, resource templates, completions and
// resource subscriptions, with a go-sdk upstream that offers them all.

// richUpstream is a go-sdk MCP server with a prompt, resources, a
// resource template, completions and subscriptions; tag marks its
// answers so a test sees which upstream answered.
type richUpstream struct {
	srv  *mcp.Server
	hs   *httptest.Server
	mu   sync.Mutex
	subs []string
}

func newRichUpstream(t *testing.T, tag string, uris ...string) *richUpstream {
	u := &richUpstream{}
	u.srv = mcp.NewServer(&mcp.Implementation{Name: "rich-" + tag, Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
				Values: []string{tag + ":" + req.Params.Ref.Type + ":" + req.Params.Ref.Name + req.Params.Ref.URI + ":" + req.Params.Argument.Value}}}, nil
		},
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			u.mu.Lock()
			u.subs = append(u.subs, req.Params.URI)
			u.mu.Unlock()
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	u.srv.AddTool(&mcp.Tool{Name: "noop", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	u.srv.AddPrompt(&mcp.Prompt{Name: "greet", Description: "Greets someone.",
		Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user",
				Content: &mcp.TextContent{Text: tag + " says hello to " + req.Params.Arguments["who"]}}}}, nil
		})
	for _, uri := range uris {
		u.srv.AddResource(&mcp.Resource{URI: uri, Name: uri, MIMEType: "text/plain"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: tag + " content of " + req.Params.URI}}}, nil
			})
	}
	u.srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: tag + "://items/{id}", Name: "item"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: tag + " item " + req.Params.URI}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.srv }, nil)
	u.hs = httptest.NewServer(h)
	t.Cleanup(func() {
		// The gateway's session holds a stream open.
		u.hs.CloseClientConnections()
		u.hs.Close()
	})
	return u
}

// addRemote registers a remote connector for an upstream URL.
func (e *env) addRemote(t *testing.T, id, url string) {
	t.Helper()
	must(t, e.st.CreateConnector(context.Background(), store.MCPConnector{ID: id, Kind: store.MCPConnectorRemote,
		UpdatedAt: time.Now(), Spec: json.RawMessage(`{"url":"` + url + `"}`)}))
}

func (e *env) addServer(t *testing.T, id, spec string, principals ...string) {
	t.Helper()
	must(t, e.st.CreateMCPServer(context.Background(), store.MCPServer{ID: id, Spec: json.RawMessage(spec)}))
	for _, p := range principals {
		must(t, e.st.PutMCPGrant(context.Background(), store.MCPGrant{ServerID: id, PrincipalID: p}))
	}
}

func promptNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListPrompts(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range res.Prompts {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func resourceURIs(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListResources(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.Resources {
		out = append(out, r.URI)
	}
	slices.Sort(out)
	return out
}

func templateURIs(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListResourceTemplates(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.ResourceTemplates {
		out = append(out, r.URITemplate)
	}
	slices.Sort(out)
	return out
}

func readText(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	var b strings.Builder
	for _, c := range res.Contents {
		b.WriteString(c.Text)
	}
	return b.String()
}

func promptText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]string) string {
	t.Helper()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("get prompt %s: %v", name, err)
	}
	var b strings.Builder
	for _, m := range res.Messages {
		if tc, ok := m.Content.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestPassthroughOneConnector: a server with one connector serves the
// upstream's prompts, resources and templates unchanged, routes reads,
// gets and completions to it, advertises what it offers, audits reads,
// and forwards subscriptions and update notifications.
func TestPassthroughOneConnector(t *testing.T) {
	for _, era := range eras {
		t.Run(eraName(era), func(t *testing.T) {
			e := newEnv(t)
			rich := newRichUpstream(t, "a", "file:///a/readme.txt", "file:///shared.txt")
			e.addRemote(t, "rich", rich.hs.URL)
			e.addServer(t, "one", `{"connectors":[{"connector":"rich"}]}`, "agent-1")
			updated := make(chan string, 4)
			cs := e.connect(t, agentKey, "one", era, &mcp.ClientOptions{
				ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI }})
			caps := cs.InitializeResult().Capabilities
			if caps.Prompts == nil || caps.Resources == nil || caps.Completions == nil {
				t.Fatalf("capabilities = %+v, want prompts, resources and completions", caps)
			}
			if era != "" && !caps.Resources.Subscribe {
				t.Fatalf("resources capability %+v lacks subscribe", caps.Resources)
			}
			if got := promptNames(t, cs); !slices.Equal(got, []string{"greet"}) {
				t.Fatalf("prompts = %v", got)
			}
			if got := promptText(t, cs, "greet", map[string]string{"who": "bob"}); got != "a says hello to bob" {
				t.Fatalf("prompt = %q", got)
			}
			if got := resourceURIs(t, cs); !slices.Equal(got, []string{"file:///a/readme.txt", "file:///shared.txt"}) {
				t.Fatalf("resources = %v", got)
			}
			if got := templateURIs(t, cs); !slices.Equal(got, []string{"a://items/{id}"}) {
				t.Fatalf("templates = %v", got)
			}
			if got := readText(t, cs, "file:///a/readme.txt"); got != "a content of file:///a/readme.txt" {
				t.Fatalf("read = %q", got)
			}
			if got := readText(t, cs, "a://items/42"); got != "a item a://items/42" {
				t.Fatalf("templated read = %q", got)
			}
			if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "file:///etc/passwd"}); err == nil {
				t.Fatal("a resource no upstream listed was read")
			}
			comp, err := cs.Complete(context.Background(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"},
				Argument: mcp.CompleteParamsArgument{Name: "who", Value: "bo"}})
			if err != nil || !slices.Equal(comp.Completion.Values, []string{"a:ref/prompt:greet:bo"}) {
				t.Fatalf("complete = %+v, %v", comp, err)
			}
			if n := len(e.audit.find("mcp.resource_read")); n != 2 {
				t.Fatalf("%d mcp.resource_read events, want 2", n)
			}
			if n := len(e.audit.find("mcp.prompt_get")); n != 1 {
				t.Fatalf("%d mcp.prompt_get events, want 1", n)
			}
			if era == "" {
				return // the stateless era subscribes with subscriptions/listen: TestGatewayStatelessSubscribe
			}
			if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "file:///shared.txt"}); err != nil {
				t.Fatal(err)
			}
			rich.mu.Lock()
			subs := slices.Clone(rich.subs)
			rich.mu.Unlock()
			if !slices.Equal(subs, []string{"file:///shared.txt"}) {
				t.Fatalf("upstream subscriptions = %v", subs)
			}
			rich.srv.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: "file:///shared.txt"})
			select {
			case uri := <-updated:
				if uri != "file:///shared.txt" {
					t.Fatalf("updated %q", uri)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no resources/updated notification reached the subscribed client")
			}
		})
	}
}

// TestPassthroughSeveralConnectors: with two connectors, prompts are
// prefixed, each resource is read from the upstream that listed it, a URI
// both list is withheld, and completions reach the right upstream under
// its own prompt name.
func TestPassthroughSeveralConnectors(t *testing.T) {
	e := newEnv(t)
	a := newRichUpstream(t, "a", "file:///a.txt", "file:///shared.txt")
	b := newRichUpstream(t, "b", "file:///b.txt", "file:///shared.txt")
	e.addRemote(t, "ca", a.hs.URL)
	e.addRemote(t, "cb", b.hs.URL)
	e.addServer(t, "two", `{"connectors":[{"connector":"ca"},{"connector":"cb","prefix":"bee"}]}`, "agent-1")
	cs := e.connect(t, agentKey, "two", "2025-11-25", nil)
	if got := promptNames(t, cs); !slices.Equal(got, []string{"bee__greet", "ca__greet"}) {
		t.Fatalf("prompts = %v", got)
	}
	if got := promptText(t, cs, "bee__greet", map[string]string{"who": "x"}); got != "b says hello to x" {
		t.Fatalf("bee__greet = %q", got)
	}
	if got := promptText(t, cs, "ca__greet", map[string]string{"who": "y"}); got != "a says hello to y" {
		t.Fatalf("ca__greet = %q", got)
	}
	if _, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "greet"}); err == nil {
		t.Fatal("the unprefixed prompt name was served")
	}
	if got := resourceURIs(t, cs); !slices.Equal(got, []string{"file:///a.txt", "file:///b.txt"}) {
		t.Fatalf("resources = %v (file:///shared.txt collides and must be withheld)", got)
	}
	if got := readText(t, cs, "file:///b.txt"); got != "b content of file:///b.txt" {
		t.Fatalf("read b = %q", got)
	}
	if got := readText(t, cs, "file:///a.txt"); got != "a content of file:///a.txt" {
		t.Fatalf("read a = %q", got)
	}
	if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "file:///shared.txt"}); err == nil {
		t.Fatal("the colliding URI was read")
	}
	if got := templateURIs(t, cs); !slices.Equal(got, []string{"a://items/{id}", "b://items/{id}"}) {
		t.Fatalf("templates = %v", got)
	}
	if got := readText(t, cs, "b://items/7"); got != "b item b://items/7" {
		t.Fatalf("templated read = %q", got)
	}
	comp, err := cs.Complete(context.Background(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "bee__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "who", Value: "z"}})
	if err != nil || !slices.Equal(comp.Completion.Values, []string{"b:ref/prompt:greet:z"}) {
		t.Fatalf("complete = %+v, %v", comp, err)
	}
	comp, err = cs.Complete(context.Background(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "a://items/{id}"},
		Argument: mcp.CompleteParamsArgument{Name: "id", Value: "4"}})
	if err != nil || !slices.Equal(comp.Completion.Values, []string{"a:ref/resource:a://items/{id}:4"}) {
		t.Fatalf("complete resource = %+v, %v", comp, err)
	}
}

// TestPassthroughOnlyWhatUpstreamsOffer: a server whose upstream offers
// tools only advertises no prompts, resources or completions, and
// answers their requests with errors; a principal not granted the server
// reaches none of it.
func TestPassthroughOnlyWhatUpstreamsOffer(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, agentKey, "s1", "2025-11-25", nil)
	caps := cs.InitializeResult().Capabilities
	if caps.Prompts != nil || caps.Resources != nil || caps.Completions != nil || caps.Tools == nil {
		t.Fatalf("capabilities = %+v, want tools only", caps)
	}
	if got := promptNames(t, cs); len(got) != 0 {
		t.Fatalf("prompts = %v, want none", got)
	}
	// An upstream with resources but neither completions nor
	// subscriptions: the server advertises resources without them.
	plain := mcp.NewServer(&mcp.Implementation{Name: "plain", Version: "1"}, nil)
	plain.AddResource(&mcp.Resource{URI: "file:///p.txt", Name: "p"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "plain"}}}, nil
	})
	phs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return plain }, nil))
	t.Cleanup(func() { phs.CloseClientConnections(); phs.Close() })
	e.addRemote(t, "plain", phs.URL)
	e.addServer(t, "plain", `{"connectors":[{"connector":"plain"}]}`, "agent-1")
	ps := e.connect(t, agentKey, "plain", "2025-11-25", nil)
	pc := ps.InitializeResult().Capabilities
	if pc.Resources == nil || pc.Resources.Subscribe || pc.Completions != nil || pc.Prompts != nil {
		t.Fatalf("capabilities = %+v (resources %+v), want resources without subscribe, no completions or prompts", pc, pc.Resources)
	}
	if got := readText(t, ps, "file:///p.txt"); got != "plain" {
		t.Fatalf("read = %q", got)
	}
	if err := ps.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "file:///p.txt"}); err == nil {
		t.Fatal("subscribed to a resource whose upstream offers no subscriptions")
	}
	rich := newRichUpstream(t, "a", "file:///a.txt")
	e.addRemote(t, "rich", rich.hs.URL)
	e.addServer(t, "one", `{"connectors":[{"connector":"rich"}]}`, "agent-1")
	// agent-3 (otherKey) has no grant of "one".
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.hs.URL + PathPrefix + "one",
		HTTPClient: &http.Client{Transport: bearer{key: otherKey}}, MaxRetries: -1}, nil); err == nil {
		t.Fatal("a principal without a grant connected")
	}
}
