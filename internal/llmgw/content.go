package llmgw

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Guardrails and the timeline (docs/llm.md "Guardrails and the timeline"):
// the request body the client sent is the llm.call action's payload, which
// the guard stage screens as target llm.prompt (mask rewrites the body the
// provider sees); the provider's answer is screened after the call as
// target llm.response (Engine.Screen): a whole answer can be blocked or
// masked before the client sees it, a stream only screened at its end
// (its text, accumulated from the deltas) and the findings recorded. The
// prompt (as sent upstream) and the answer go on the Agent Monitor's
// timeline as events llm.prompt and llm.response.

// Timeline takes the gateway's prompt and response events without blocking
// (*monitor.Monitor).
type Timeline interface {
	RecordLLM(e store.MonitorEvent)
}

// Timeline event kinds.
const (
	EventPrompt   = "llm.prompt"
	EventResponse = "llm.response"
	// SourceLLM is the timeline source of the gateway's events.
	SourceLLM = "llm"
)

// maxStreamText bounds the text of a stream kept for the guard and the
// timeline; the rest is not screened (the findings say so).
const maxStreamText = govern.MaxGuardBody

// promptPayload is the guard's view of a request body.
func promptPayload(body []byte) *govern.Payload {
	if len(body) > govern.MaxGuardBody {
		return &govern.Payload{Body: body[:govern.MaxGuardBody], Truncated: true}
	}
	return &govern.Payload{Body: body}
}

// screensResponses reports whether some guard screens llm.response.
func (g *Gateway) screensResponses() bool {
	return g.cfg.Govern != nil && g.cfg.Govern.GuardsTarget(govern.GuardTargetLLMResponse)
}

// collectsStream reports whether a stream's text is collected: for the
// guard or the timeline.
func (g *Gateway) collectsStream() bool {
	return g.cfg.Timeline != nil || g.screensResponses()
}

// screenResponse screens a whole (non-streamed) answer: it returns the
// body to send (masked or as is) or, when a guard blocks it, a non-empty
// refusal message naming the detector.
func (g *Gateway) screenResponse(ctx context.Context, c *call, b []byte) ([]byte, string) {
	if !g.screensResponses() {
		return b, ""
	}
	d, masked, err := g.cfg.Govern.Screen(ctx, c.action, b)
	if len(d.Findings) > 0 || d.Outcome != govern.Allow || err != nil {
		c.more = append(c.more, govern.Decided{Action: c.action, Decision: d})
	}
	if err != nil {
		g.log.Error("llm gateway: screen response", "err", err)
		return nil, "the response could not be screened"
	}
	if derr := d.Err(); derr != nil {
		return nil, "the response was refused: " + d.Message
	}
	if masked != nil {
		c.detail["response_masked"] = true
		return masked, ""
	}
	return b, ""
}

// screenStream screens a relayed stream's text at its end: nothing can be
// taken back, so a block or a mask is recorded (the findings, and
// detail.response_guard saying what could not be done), not enforced.
func (g *Gateway) screenStream(ctx context.Context, c *call) {
	if c.text == nil || !g.screensResponses() {
		return
	}
	d, masked, err := g.cfg.Govern.Screen(ctx, c.action, []byte(c.text.String()))
	if err != nil {
		g.log.Error("llm gateway: screen stream", "err", err)
		c.detail["response_guard"] = "the stream could not be screened"
		return
	}
	if len(d.Findings) == 0 && d.Outcome == govern.Allow {
		return
	}
	if d.Outcome == govern.Deny || masked != nil {
		c.detail["response_guard"] = "found in the stream after it was sent: recorded, not blocked or masked"
		// The stream went out: the decision recorded is what happened.
		d.Outcome, d.Masked = govern.LogOnly, nil
	}
	if c.text.cut {
		c.detail["response_guard_truncated"] = true
	}
	c.more = append(c.more, govern.Decided{Action: c.action, Decision: d})
}

// record puts the call's prompt and response on the timeline.
func (g *Gateway) record(c *call, respContent string) {
	tl := g.cfg.Timeline
	if tl == nil || c.prompt == nil {
		return
	}
	p := c.ident.Principal
	agentID := ""
	if p.Kind == store.PrincipalAgent {
		agentID = p.ID
	}
	detail := map[string]any{"request_id": c.action.RequestID, "provider": c.prov.Name, "api": c.api,
		"model": c.model, "stream": c.action.LLM.Stream}
	if c.agent != "" {
		detail["agent"] = c.agent
	}
	raw, _ := json.Marshal(detail)
	now := g.cfg.Now().UTC()
	target := "llm:" + c.prov.Name + "/" + c.model
	tl.RecordLLM(store.MonitorEvent{Time: c.start.UTC(), Kind: EventPrompt, Source: SourceLLM, Principal: p.ID,
		Agent: agentID, Sandbox: c.sandbox, Action: EventPrompt, Target: target, Outcome: govern.AuditSuccess, Detail: raw,
		Content: string(c.prompt)})
	if respContent != "" {
		tl.RecordLLM(store.MonitorEvent{Time: now, Kind: EventResponse, Source: SourceLLM, Principal: p.ID,
			Agent: agentID, Sandbox: c.sandbox, Action: EventResponse, Target: target, Outcome: c.outcome, Detail: raw,
			Content: respContent})
	}
}

// streamText accumulates the text of a stream's deltas: OpenAI chat
// (choices[].delta.content and tool call arguments), OpenAI responses
// (response.*.delta) and Anthropic messages (content_block_delta text and
// partial JSON).
type streamText struct {
	strings.Builder
	cut bool
}

type streamEvent struct {
	Type    string          `json:"type"`
	Delta   json.RawMessage `json:"delta"`
	Choices []struct {
		Delta struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// add reads one SSE data payload.
func (t *streamText) add(data []byte) {
	// Every delta event names "delta"; the rest (usage, stops) is not decoded.
	if len(data) == 0 || data[0] != '{' || t.cut || !bytes.Contains(data, []byte(`"delta`)) {
		return
	}
	var ev streamEvent
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	for _, ch := range ev.Choices {
		t.put(ch.Delta.Content)
		for _, tc := range ch.Delta.ToolCalls {
			t.put(tc.Function.Arguments)
		}
	}
	if len(ev.Delta) == 0 {
		return
	}
	switch ev.Delta[0] {
	case '"': // responses: response.output_text.delta and the like
		var s string
		if json.Unmarshal(ev.Delta, &s) == nil {
			t.put(s)
		}
	case '{': // Anthropic: text_delta, input_json_delta, thinking_delta
		var d struct {
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			Thinking    string `json:"thinking"`
		}
		if json.Unmarshal(ev.Delta, &d) == nil {
			t.put(d.Text)
			t.put(d.PartialJSON)
			t.put(d.Thinking)
		}
	}
}

func (t *streamText) put(s string) {
	if s == "" || t.cut {
		return
	}
	if t.Len()+len(s) > maxStreamText {
		s = s[:maxStreamText-t.Len()]
		t.cut = true
	}
	t.WriteString(s)
}
