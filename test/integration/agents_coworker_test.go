package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agents/slack/slacktest"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestAgentCoworker is issue 23's end to end: the reference agent
// (examples/agents/coworker, Python) runs in a sandbox whose network allows
// nothing, and reaches Warden itself at http://warden.internal. A Slack
// mention starts a run; a fake OpenAI-compatible model scripts its tool
// calls through the LLM gateway; the agent runs a command in its own
// sandbox and writes a memory through the MCP gateway, and replies in the
// thread; a later mention's run recalls that memory. Each run records the
// tokens and cost of its calls; the agent's llm_budget then cuts it off.
// The route serves the gateways only, and only to live runs.
func TestAgentCoworker(t *testing.T) {
	src, err := os.ReadFile("../../examples/agents/coworker/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	up := httptest.NewServer(model)
	defer up.Close()
	fake := slacktest.New("slack-signing-secret-cw", "xoxb-coworker-token")
	defer fake.Close()

	// The provider key is a secret: store it, then start wardend with the
	// LLM gateway configured to use it.
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	sec, err := c.PutSecret(ctx, "openai-cw", "sk-coworker-provider")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"slack-signing": "slack-signing-secret-cw", "slack-bot": "xoxb-coworker-token"} {
		if _, err := c.PutSecret(ctx, name, v); err != nil {
			t.Fatal(err)
		}
	}
	d.stop(syscall.SIGTERM)
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	cfg := fmt.Sprintf(`llm:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
  providers:
    - {name: openai, kind: openai, base_url: %q, key_secret: %q}
  prices:
    - {model: "gpt-cw", input: 2, output: 8}
`, up.URL+"/v1", sec.ID)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, state, run, "--config", conf)
	c = d.client(t, d.adminKey)
	ctx = ctxT(t)

	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "cw-tools", "kind": "builtin",
		"spec": map[string]any{"tools": []string{"sandbox_exec", "memory_remember", "memory_recall"}}})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "coworker-tools",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "cw-tools"}}}})
	createAgent(t, c, map[string]any{"name": "coworker",
		"command":     []string{"/usr/bin/python3", "-c", string(src)},
		"env":         map[string]string{"MODEL": "gpt-cw"},
		"scopes":      []string{"mcp:use", "llm:use", "sandboxes:exec"},
		"mcp_servers": []string{"coworker-tools"},
		// Five calls of 120 tokens fit; the sixth finds 600 used.
		"llm_budget": map[string]any{"tokens": 600},
		"triggers": map[string]any{"slack": map[string]any{"signing_secret": "slack-signing", "bot_token": "slack-bot",
			"api_url": fake.APIURL()}}})
	events := d.url + "/v1/agents/coworker/slack/events"

	mention := func(id, text string) (runID, thread string) {
		t.Helper()
		body := fake.Mention(id, "U0ALICE", "C0TEAM", text, "")
		if code, b, err := fake.Send(ctx, events, slacktest.Request{Body: body}); err != nil || code != http.StatusOK {
			t.Fatalf("mention %s: %d %s %v", id, code, b, err)
		}
		var ev struct {
			Event struct{ TS string } `json:"event"`
		}
		json.Unmarshal(body, &ev)
		deadline := time.Now().Add(30 * time.Second)
		for {
			runs, err := c.AgentRuns(ctx, "coworker", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if strings.Contains(string(r.Input), id) {
					return r.ID, ev.Event.TS
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("mention %s started no run", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	finished := func(id string, calls int64) warden.AgentRun {
		t.Helper()
		r := waitRun(t, c, id, "ended", func(r warden.AgentRun) bool { return r.Ended() })
		if r.State != warden.AgentRunSucceeded {
			_, all := runLog(t, c, id)
			t.Fatalf("run %s: %s (%s)\nlog:\n%s\nwardend:\n%s", id, r.State, r.Reason, all, d.log)
		}
		// The last call settles once its answer was sent: wait for it.
		return waitRun(t, c, id, "with its usage", func(r warden.AgentRun) bool { return r.LLMCalls >= calls })
	}

	t.Run("MentionExecRememberReply", func(t *testing.T) {
		id, thread := mention("EvCW1", "which kernel runs here? remember it")
		r := finished(id, 3)
		posts, err := fake.WaitPosts(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := posts[0]
		if p.Channel != "C0TEAM" || p.ThreadTS != thread || p.Token != "xoxb-coworker-token" || !strings.Contains(p.Text, "The kernel is Linux") {
			t.Fatalf("reply: %+v", p)
		}
		// The model saw the command's output from the run's own sandbox.
		if got := model.toolResult(1); !strings.Contains(got, "Linux") {
			t.Errorf("sandbox_exec result: %q", got)
		}
		// Three calls, 100 in and 20 out each, at $2 and $8 per million.
		if r.LLMCalls != 3 || r.TokensIn != 300 || r.TokensOut != 60 || r.CostMicros != 3*(100*2+20*8) {
			t.Errorf("run usage: calls %d in %d out %d cost %d", r.LLMCalls, r.TokensIn, r.TokensOut, r.CostMicros)
		}
		out, errOut, code := d.cli(t, "", "agent", "runs", "coworker")
		if code != 0 || !strings.Contains(out, "TOKENS") || !strings.Contains(out, "360") || !strings.Contains(out, "$0.0011") {
			t.Errorf("agent runs: %d\n%s\n%s", code, out, errOut)
		}
		// The memory is the agent's, written by this run.
		b := adminCall(t, d, d.adminKey, "GET", "/v1/agents/coworker/memory/entry?key=kernel", nil)
		if !strings.Contains(string(b), "Linux") || !strings.Contains(string(b), id) {
			t.Errorf("memory entry: %s", b)
		}
	})

	t.Run("LaterRunRecalls", func(t *testing.T) {
		id, thread := mention("EvCW2", "what kernel did you see yesterday?")
		r := finished(id, 2)
		posts, err := fake.WaitPosts(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		p := posts[1]
		if p.ThreadTS != thread || !strings.Contains(p.Text, "From memory:") || !strings.Contains(p.Text, "Linux") {
			t.Fatalf("reply: %+v", p)
		}
		if r.LLMCalls != 2 || r.TokensIn+r.TokensOut != 240 {
			t.Errorf("run usage: %+v", r)
		}
	})

	t.Run("RouteIsGatewaysOnly", func(t *testing.T) {
		// A run's own probe: the API beyond the gateways is not served,
		// the internet is not reachable, and the key works on the gateway.
		createAgent(t, c, map[string]any{"name": "prober", "command": []string{"/usr/bin/python3", "-c", proberSrc}})
		r, err := c.RunAgent(ctx, "prober", json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		r = waitRun(t, c, r.ID, "ended", func(r warden.AgentRun) bool { return r.Ended() })
		stdout, all := runLog(t, c, r.ID)
		for _, want := range []string{"api=404 not_found", "llm=401", "keyed-llm=400", "internet=refused", "url=http://warden.internal"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("prober output lacks %q:\n%s", want, all)
			}
		}
		if r.State != warden.AgentRunSucceeded {
			t.Errorf("prober: %s %s\n%s", r.State, r.Reason, all)
		}

		// A sandbox that is no live run's resolves the name but is not served.
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Network: &warden.NetworkPolicy{Mode: "allowlist"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.KillSandbox(ctx, sb.ID)
		var out strings.Builder
		probe := `import urllib.request
try:
    urllib.request.urlopen("http://warden.internal/llm/openai/v1/models", timeout=10); print("served")
except Exception as e: print("refused", type(e).__name__)`
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"/usr/bin/python3", "-c", probe}}, warden.ExecIO{Stdout: &out, Stderr: &out}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "refused") {
			t.Errorf("a sandbox that is no run's reached Warden: %s", out.String())
		}
	})

	t.Run("BudgetStopsTheAgent", func(t *testing.T) {
		r, err := c.RunAgent(ctx, "coworker", json.RawMessage(`{"text":"hello again"}`))
		if err != nil {
			t.Fatal(err)
		}
		r = waitRun(t, c, r.ID, "ended", func(r warden.AgentRun) bool { return r.Ended() })
		_, all := runLog(t, c, r.ID)
		if r.State != warden.AgentRunFailed || !strings.Contains(all, "budget_exceeded") || !strings.Contains(all, "agent:coworker") {
			t.Fatalf("over budget: %s %s\n%s", r.State, r.Reason, all)
		}
		if r.LLMCalls != 0 {
			t.Errorf("a refused call counted: %+v", r)
		}
	})
}

// proberSrc checks the route from inside a run's sandbox.
const proberSrc = `
import json, os, socket, urllib.request, urllib.error
url = os.environ["WARDEN_URL"]
print("url=" + url)
def get(path, body=None, key=None):
    h = {"Content-Type": "application/json"}
    if key: h["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url + path, data=body, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=20) as r: return r.status, r.read().decode()
    except urllib.error.HTTPError as e: return e.code, e.read().decode()
st, b = get("/v1/sandboxes", key=os.environ["WARDEN_API_KEY"])
print("api=%d %s" % (st, json.loads(b).get("code")))
st, b = get("/llm/openai/v1/chat/completions", body=b"{}")
print("llm=%d" % st)
st, b = get("/llm/openai/v1/chat/completions", body=b"{}", key=os.environ["WARDEN_API_KEY"])
print("keyed-llm=%d" % st)
try:
    socket.create_connection(("1.1.1.1", 80), timeout=5); print("internet=open")
except OSError: print("internet=refused")
`

// scriptedModel is a fake OpenAI-compatible chat server that scripts the
// coworker's tool calls from the conversation so far: the runs are told
// apart by their question, the step by the tool results already given.
type scriptedModel struct {
	mu    sync.Mutex
	calls map[string]int      // by question
	tools map[string][]string // tool results seen, by question
}

func (m *scriptedModel) toolResult(i int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for q, rs := range m.tools {
		if strings.Contains(q, "which kernel") && len(rs) >= i {
			return rs[i-1]
		}
	}
	return ""
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path != "/v1/chat/completions" || json.Unmarshal(b, &req) != nil || r.Header.Get("Authorization") != "Bearer sk-coworker-provider" {
		http.Error(w, `{"error":{"message":"bad request to the fake model"}}`, http.StatusBadRequest)
		return
	}
	var question string
	var results []string
	for _, msg := range req.Messages {
		switch msg.Role {
		case "user":
			question = msg.Content
		case "tool":
			results = append(results, msg.Content)
		}
	}
	m.mu.Lock()
	if m.calls == nil {
		m.calls, m.tools = map[string]int{}, map[string][]string{}
	}
	m.calls[question]++
	m.tools[question] = results
	m.mu.Unlock()
	call := func(name string, args map[string]any) map[string]any {
		a, _ := json.Marshal(args)
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": fmt.Sprintf("call-%d", len(results)), "type": "function",
			"function": map[string]any{"name": name, "arguments": string(a)}}}}
	}
	say := func(text string) map[string]any { return map[string]any{"role": "assistant", "content": text} }
	var msg map[string]any
	switch {
	case len(req.Tools) == 0:
		msg = say("no tools were offered")
	case strings.Contains(question, "which kernel"):
		switch len(results) {
		case 0:
			msg = call("sandbox_exec", map[string]any{"command": "uname -s"})
		case 1:
			kernel := "unknown"
			if strings.Contains(results[0], "Linux") {
				kernel = "Linux"
			}
			msg = call("memory_remember", map[string]any{"key": "kernel", "text": "the sandbox kernel is " + kernel})
		default:
			msg = say("The kernel is Linux, and I will remember it.")
		}
	case strings.Contains(question, "kernel did you see"):
		if len(results) == 0 {
			msg = call("memory_recall", map[string]any{"query": "kernel"})
		} else {
			msg = say("From memory: " + results[0])
		}
	default:
		msg = say("hello")
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": "cmpl-cw", "object": "chat.completion", "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})
}
