package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// Full-protocol pass-through through the real daemon (issue 20, docs/mcp.md
// "Protocol"): an upstream tool logs and asks its client for a sample and
// an elicitation during a call. Two upstreams: a session-era one (a
// stateful go-sdk handler: the gateway's client falls back to initialize,
// and the upstream sends sampling/createMessage and elicitation/create as
// requests) and a stateless-era one (2026-07-28: it answers with an
// input-required result). Two principals call at once through session-era
// go-sdk clients that set different log levels: each gets its own log
// messages at its level and its own sampling and elicitation requests, and
// the upstream gets each client's answers for that client's call. A
// stateless go-sdk client gets the stateless upstream's requests and the
// log messages at its request's level. A client without sampling or
// elicitation: the upstream is not told it has them, and its requests fail
// at once. The npm @modelcontextprotocol/sdk client does the same as a
// session-era client.

// passUpstream serves "ask" (see the package comment above).
type passUpstream struct {
	hs      *httptest.Server
	mu      sync.Mutex
	answers []string
	caps    []string
}

func newPassUpstream(t *testing.T, stateless bool) *passUpstream {
	u := &passUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "ask", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}})
	srv.AddTool(&mcp.Tool{Name: "ask", Description: "Logs, samples and elicits.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"tag":{"type":"string"}}}`)}, u.ask)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: stateless})
	u.hs = httptest.NewServer(h)
	t.Cleanup(func() {
		u.hs.CloseClientConnections()
		u.hs.Close()
	})
	return u
}

func (u *passUpstream) ask(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
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
	if req.Params.RequestState == "" {
		ss.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Logger: "ask", Data: "debug " + a.Tag})
		ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "ask", Data: "info " + a.Tag})
		u.mu.Lock()
		u.caps = append(u.caps, fmt.Sprintf("%s sampling=%v elicitation=%v", a.Tag, caps.Sampling != nil, caps.Elicitation != nil))
		u.mu.Unlock()
	}
	sample := &mcp.CreateMessageParams{MaxTokens: 16, Messages: []*mcp.SamplingMessage{{Role: "user",
		Content: &mcp.TextContent{Text: "sample " + a.Tag}}}}
	elicit := &mcp.ElicitParams{Message: "elicit " + a.Tag, RequestedSchema: json.RawMessage(
		`{"type":"object","properties":{"answer":{"type":"string"}}}`)}
	var sampled, elicited string
	if ip != nil && ip.ProtocolVersion >= "2026-07-28" {
		if req.Params.RequestState == "" {
			ir := mcp.InputRequestMap{}
			if caps.Sampling != nil {
				ir["s"] = sample
			}
			if caps.Elicitation != nil {
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
		if cm, err := ss.CreateMessage(ctx, sample); err != nil {
			sampled = "error: " + err.Error()
		} else if tc, ok := cm.Content.(*mcp.TextContent); ok {
			sampled = tc.Text
		}
		if er, err := ss.Elicit(ctx, elicit); err != nil {
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

func (u *passUpstream) seen(list *[]string, s string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, x := range *list {
		if x == s {
			return true
		}
	}
	return false
}

// passClient answers sampling and elicitation with its name and records
// its log messages.
type passClient struct {
	name string
	mu   sync.Mutex
	logs []string
}

func (c *passClient) options(interactive bool) *mcp.ClientOptions {
	o := &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
		c.mu.Lock()
		c.logs = append(c.logs, string(r.Params.Level)+":"+fmt.Sprint(r.Params.Data))
		c.mu.Unlock()
	}}
	if interactive {
		o.CreateMessageHandler = func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			in := ""
			if tc, ok := r.Params.Messages[0].Content.(*mcp.TextContent); ok {
				in = tc.Text
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

// waitLog waits for a log message containing want and returns them all.
func (c *passClient) waitLog(t *testing.T, want string) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c.mu.Lock()
		logs := append([]string(nil), c.logs...)
		c.mu.Unlock()
		for _, l := range logs {
			if strings.Contains(l, want) {
				return logs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log message with %q; got %q", c.name, want, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// passConnect connects a go-sdk client; version "" is the stateless era.
func passConnect(t *testing.T, d *daemon, key, server, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "it-pass", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp/v/" + server,
		HTTPClient: &http.Client{Transport: keyAuth{key}}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to /mcp/v/%s: %v\n%s", server, err, d.log)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// npmPassScript is a session-era npm client that answers sampling and
// elicitation, sets the log level to info and calls "ask", printing the
// result and the log messages it got as one JSON line.
const npmPassScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, ElicitRequestSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
const [url, key, tag] = process.argv.slice(2);
const client = new Client({ name: "warden-it-npm-pass", version: "1" }, { capabilities: { sampling: {}, elicitation: {} } });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params.level + ":" + n.params.data); });
client.setRequestHandler(CreateMessageRequestSchema, async (r) => ({ role: "assistant", model: "m",
  content: { type: "text", text: "npm-model(" + r.params.messages[0].content.text.replaceAll(" ", "_") + ")" } }));
client.setRequestHandler(ElicitRequestSchema, async (r) => ({ action: "accept",
  content: { answer: "npm-user(" + r.params.message.replaceAll(" ", "_") + ")" } }));
const transport = new StreamableHTTPClientTransport(new URL(url),
  { requestInit: { headers: { Authorization: "Bearer " + key } } });
await client.connect(transport);
await client.setLoggingLevel("info");
const res = await client.callTool({ name: "ask", arguments: { tag } });
const text = res.content.filter((c) => c.type === "text").map((c) => c.text).join("");
for (let i = 0; i < 100 && !logs.some((l) => l.includes("info " + tag)); i++) await new Promise((r) => setTimeout(r, 50));
console.log(JSON.stringify({ text, logs, isError: !!res.isError }));
await client.close();
`

func TestMCPPassthrough(t *testing.T) {
	ups := map[string]*passUpstream{"legacy": newPassUpstream(t, false), "modern": newPassUpstream(t, true)}
	state, run := newDirs(t)
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	if err := os.WriteFile(conf, []byte("mcp:\n  allow_hosts: [\"127.0.0.1\"]\n  allow_http: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, run, "--config", conf)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)
	keys := map[string]string{}
	for _, name := range []string{"alice", "bob"} {
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "pass-" + name})
		if err != nil {
			t.Fatal(err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "mcp", Scopes: []string{"mcp:use"}})
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k.Key
		keys[name+"-id"] = p.ID
	}
	for id, u := range ups {
		adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": id, "kind": "remote",
			"spec": map[string]any{"url": u.hs.URL}})
		adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "pass-" + id,
			"spec": map[string]any{"connectors": []any{map[string]any{"connector": id}}}})
		for _, name := range []string{"alice", "bob"} {
			adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/pass-"+id+"/grants/"+keys[name+"-id"], nil)
		}
		cs := passConnect(t, d, keys["alice"], "pass-"+id, "2025-11-25", nil)
		mcpTools(t, cs) // the gateway reads the upstream: "ask" is pending
		if got := approvePending(t, d, id); len(got) != 1 {
			t.Fatalf("%s: approved %v", id, got)
		}
		waitTools(t, cs, func(n []string) bool { return len(n) == 1 && n[0] == "ask" })
		cs.Close()
	}

	for _, id := range []string{"legacy", "modern"} {
		up, server := ups[id], "pass-"+id
		t.Run(id+"/two-principals", func(t *testing.T) {
			alice, bob := &passClient{name: "alice"}, &passClient{name: "bob"}
			acs := passConnect(t, d, keys["alice"], server, "2025-11-25", alice.options(true))
			bcs := passConnect(t, d, keys["bob"], server, "2025-11-25", bob.options(true))
			if acs.InitializeResult().Capabilities.Logging == nil {
				t.Fatalf("the virtual server does not offer logging: %+v", acs.InitializeResult().Capabilities)
			}
			if err := acs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
				t.Fatal(err)
			}
			if err := bcs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[string]string{}
			for tag, cs := range map[string]*mcp.ClientSession{id + "-alice": acs, id + "-bob": bcs} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"tag": tag}})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						got[tag] = "error: " + err.Error()
					} else {
						got[tag] = mcpText(res)
					}
				}()
			}
			wg.Wait()
			for _, who := range []string{"alice", "bob"} {
				tag := id + "-" + who
				want := fmt.Sprintf("%s sampled=%s-model(sample_%s) elicited=%s-user(elicit_%s)", tag, who, tag, who, tag)
				if got[tag] != want {
					t.Errorf("%s: got %q, want %q", tag, got[tag], want)
				}
				if !up.seen(&up.answers, want) {
					t.Errorf("the upstream did not get %q", want)
				}
			}
			for _, l := range alice.waitLog(t, "info "+id+"-alice") {
				if strings.Contains(l, "debug") || strings.Contains(l, "bob") {
					t.Errorf("alice got %q", l)
				}
			}
			bob.waitLog(t, "info "+id+"-bob")
			for _, l := range bob.waitLog(t, "debug "+id+"-bob") {
				if strings.Contains(l, "alice") {
					t.Errorf("bob got %q", l)
				}
			}
		})
		t.Run(id+"/stateless-client", func(t *testing.T) {
			carol := &passClient{name: "carol"}
			cs := passConnect(t, d, keys["alice"], server, "", carol.options(true))
			tag := id + "-carol"
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"tag": tag},
				Meta: mcp.Meta{mcp.MetaKeyLogLevel: "info"}})
			if err != nil {
				t.Fatal(err)
			}
			got := mcpText(res)
			if id == "modern" {
				if want := fmt.Sprintf("%s sampled=carol-model(sample_%s) elicited=carol-user(elicit_%s)", tag, tag, tag); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			} else if !strings.Contains(got, "sampled=error") || !strings.Contains(got, "elicited=error") {
				// A session-era upstream's requests cannot reach a
				// stateless client: they fail at once.
				t.Errorf("got %q", got)
			}
			for _, l := range carol.waitLog(t, "info "+tag) {
				if strings.Contains(l, "debug") {
					t.Errorf("carol got %q", l)
				}
			}
		})
		t.Run(id+"/no-capabilities", func(t *testing.T) {
			for _, era := range []string{"2025-11-25", ""} {
				cs := passConnect(t, d, keys["bob"], server, era, (&passClient{name: "dave"}).options(false))
				tag := id + "-dave-" + era
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"tag": tag}})
				cancel()
				if err != nil {
					t.Fatalf("%q: %v", era, err)
				}
				if !up.seen(&up.caps, tag+" sampling=false elicitation=false") {
					t.Errorf("%q: the upstream was told the client can sample or elicit", era)
				}
				if txt := mcpText(res); !res.IsError && !strings.Contains(txt, "error") {
					t.Errorf("%q: got %q", era, txt)
				}
			}
		})
	}

	t.Run("npm-client", func(t *testing.T) {
		work, node := npmWork(t, npmMCPSDK)
		script := filepath.Join(work, "pass.mjs")
		if err := os.WriteFile(script, []byte(npmPassScript), 0o644); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, node, script, d.url+"/mcp/v/pass-legacy", keys["alice"], "legacy-npm")
		cmd.Dir = work
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm client: %v\n%s", err, out)
		}
		var r struct {
			Text    string   `json:"text"`
			Logs    []string `json:"logs"`
			IsError bool     `json:"isError"`
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("npm client output: %v\n%s", err, out)
		}
		want := "legacy-npm sampled=npm-model(sample_legacy-npm) elicited=npm-user(elicit_legacy-npm)"
		if r.Text != want || r.IsError {
			t.Errorf("npm client: got %+v, want %q", r, want)
		}
		found := false
		for _, l := range r.Logs {
			if strings.Contains(l, "debug") {
				t.Errorf("npm client got %q", l)
			}
			found = found || strings.Contains(l, "info legacy-npm")
		}
		if !found {
			t.Errorf("npm client got no info log: %q", r.Logs)
		}
	})
}
