package llmgw

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/govern"
)

// The SDK versions TestNodeSDKs installs.
const (
	openaiSDK    = "openai@4.104.0"
	anthropicSDK = "@anthropic-ai/sdk@1.15.0"
)

const sdkScript = `
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
const base = process.env.GW, key = process.env.KEY
const out = {}
const oai = new OpenAI({ baseURL: base + '/llm/openai/v1', apiKey: key })
const r = await oai.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'hi' }] })
out.chat = r.choices[0].message.content
out.chatUsage = r.usage.completion_tokens
let text = ''
const s = await oai.chat.completions.create({ model: 'gpt-4o-mini', stream: true, messages: [] })
for await (const c of s) text += c.choices[0]?.delta?.content ?? ''
out.stream = text
const ant = new Anthropic({ baseURL: base + '/llm/anthropic', apiKey: key })
const m = await ant.messages.create({ model: 'claude-x', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
out.messages = m.content[0].text
let atext = ''
const as = await ant.messages.create({ model: 'claude-x', max_tokens: 10, stream: true, messages: [] })
for await (const e of as) if (e.type === 'content_block_delta') atext += e.delta.text
out.messagesStream = atext
try {
  await oai.chat.completions.create({ model: 'gpt-4o-mini', messages: [] })
  out.budget = 'not refused'
} catch (e) { out.budget = e.status + ' ' + e.message }
console.log(JSON.stringify(out))
`

// TestNodeSDKs points the real npm openai and @anthropic-ai/sdk clients at
// the gateway: chat and messages, streaming and not, and a budget's 429
// surfaced as the SDK's error (not retried).
func TestNodeSDKs(t *testing.T) {
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		t.Fatalf("node or npm is not installed (%v, %v): scripts/install-deps.sh installs them, and this test needs the real SDKs", errNode, errNpm)
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"name":"warden-llmgw-sdk","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inst := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", openaiSDK, anthropicSDK)
	inst.Dir = work
	if out, err := inst.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(work, "t.mjs"), []byte(sdkScript), 0o644); err != nil {
		t.Fatal(err)
	}
	// 17 + 19 + 33 + 33 tokens pass the 100-token budget's check; the
	// fifth call finds it spent.
	e := newEnv(t, nil, []config.LLMBudget{{Name: "sdk-day", Principal: "*", Period: "day", Tokens: 100}})
	run := exec.CommandContext(ctx, node, "t.mjs")
	run.Dir = work
	run.Env = append(os.Environ(), "GW="+e.srv.URL, "KEY="+agentKey)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var res map[string]any
	if err := json.Unmarshal(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:], &res); err != nil {
		t.Fatalf("node output %s: %v", out, err)
	}
	if res["chat"] != "Hello" || res["chatUsage"] != float64(5) || res["stream"] != "Hello" || res["messages"] != "Hi" || res["messagesStream"] != "Hi" {
		t.Fatalf("SDK results %v", res)
	}
	if b, _ := res["budget"].(string); !strings.HasPrefix(b, "429 ") || !strings.Contains(b, `"sdk-day"`) {
		t.Fatalf("the budget's refusal as the SDK saw it: %q", res["budget"])
	}
	denied := 0
	for _, ev := range e.audit.all() {
		if ev.Outcome == govern.AuditDenied {
			denied++
		}
	}
	if denied != 1 {
		t.Fatalf("%d refused calls audited, want 1: the SDK retried the 429", denied)
	}
	if n := e.oai.calls; n != 2 {
		t.Fatalf("%d calls reached the OpenAI upstream, want 2 (the 429 is not retried upstream)", n)
	}
	if u := e.usage(t, "gpt-4o-mini"); u.TokensIn != 24 || u.TokensOut != 12 {
		t.Fatalf("usage %+v", u)
	}
}
