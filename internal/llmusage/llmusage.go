// Package llmusage reads LLM providers' usage fields: the tokens a call
// used, from an OpenAI or Anthropic response body or its server-sent
// event stream. The LLM gateway (internal/llmgw) reads the events it
// relays with it, and the egress broker (internal/broker) the copy of a
// brokered provider response it taps (Tap), so that both count the same
// way (docs/llm.md).
package llmusage

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
)

// Usage is the providers' usage fields: OpenAI chat and embeddings
// (prompt/completion), OpenAI responses and Anthropic (input/output,
// Anthropic's cache counts apart).
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheCreation    int64 `json:"cache_creation_input_tokens"`
	CacheRead        int64 `json:"cache_read_input_tokens"`
}

// In is the input tokens (Anthropic's cache writes and reads included).
func (u Usage) In() int64 { return u.PromptTokens + u.InputTokens + u.CacheCreation + u.CacheRead }

// Out is the output tokens.
func (u Usage) Out() int64 { return u.CompletionTokens + u.OutputTokens }

// Merge keeps the larger of each count: Anthropic's message_delta repeats
// the cumulative output count, message_start the input.
func (u *Usage) Merge(v Usage) {
	u.PromptTokens = max(u.PromptTokens, v.PromptTokens)
	u.CompletionTokens = max(u.CompletionTokens, v.CompletionTokens)
	u.InputTokens = max(u.InputTokens, v.InputTokens)
	u.OutputTokens = max(u.OutputTokens, v.OutputTokens)
	u.CacheCreation = max(u.CacheCreation, v.CacheCreation)
	u.CacheRead = max(u.CacheRead, v.CacheRead)
}

// FromBody reads the usage of a whole (non-streamed) JSON response: its
// top-level "usage" object (OpenAI chat, embeddings and responses,
// Anthropic messages). It reports whether there was one.
func (u *Usage) FromBody(body []byte) bool {
	var env struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(body, &env) != nil || env.Usage == nil {
		return false
	}
	u.Merge(*env.Usage)
	return true
}

// FromEvent reads usage from one SSE data payload and reports whether it
// is an OpenAI chat usage chunk (usage with no choices): OpenAI chat's
// final chunk (stream_options.include_usage), the responses API's
// response.completed, Anthropic's message_start and message_delta.
func (u *Usage) FromEvent(data []byte) bool {
	if len(data) == 0 || data[0] != '{' || !hasUsageObject(data) {
		return false
	}
	var ev struct {
		Usage   *Usage `json:"usage"`
		Message *struct {
			Usage *Usage `json:"usage"`
		} `json:"message"`
		Response *struct {
			Usage *Usage `json:"usage"`
		} `json:"response"`
		Choices *[]json.RawMessage `json:"choices"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return false
	}
	if ev.Usage != nil {
		u.Merge(*ev.Usage)
	}
	if ev.Message != nil && ev.Message.Usage != nil {
		u.Merge(*ev.Message.Usage)
	}
	if ev.Response != nil && ev.Response.Usage != nil {
		u.Merge(*ev.Response.Usage)
	}
	return ev.Usage != nil && ev.Choices != nil && len(*ev.Choices) == 0
}

// hasUsageObject reports whether data has a "usage" key whose value is an
// object, so that most stream events ("usage":null or none) are passed on
// without being decoded.
func hasUsageObject(data []byte) bool {
	for rest := data; ; {
		i := bytes.Index(rest, []byte(`"usage"`))
		if i < 0 {
			return false
		}
		rest = rest[i+len(`"usage"`):]
		j := 0
		for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r' || rest[j] == ':') {
			j++
		}
		if j < len(rest) && rest[j] == '{' {
			return true
		}
	}
}

// ModelOf returns the model a response or stream event names: its
// "model", or its message's (Anthropic's message_start) or response's
// (OpenAI's response.* events); "" when none.
func ModelOf(data []byte) string {
	if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, []byte(`"model"`)) {
		return ""
	}
	var ev struct {
		Model   string `json:"model"`
		Message *struct {
			Model string `json:"model"`
		} `json:"message"`
		Response *struct {
			Model string `json:"model"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return ""
	}
	switch {
	case ev.Model != "":
		return ev.Model
	case ev.Message != nil && ev.Message.Model != "":
		return ev.Message.Model
	case ev.Response != nil:
		return ev.Response.Model
	}
	return ""
}

// RequestModel returns the top-level "model" of a JSON request body of
// which prefix is the start: the object's members are read in order up to
// "model", so a body cut after it (a long one, of which only the start was
// kept) still names it. "" when it cannot be read.
func RequestModel(prefix []byte) string {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		key, _ := t.(string)
		if key == "model" {
			t, err := dec.Token()
			if s, ok := t.(string); ok && err == nil {
				return s
			}
			return ""
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// API names the model API a request path is a call of, by its last
// segments: "chat" (…/chat/completions), "completions", "embeddings",
// "responses" (OpenAI) or "messages" (Anthropic); "" for other paths
// (model lists, batches, token counts), which are not metered.
func API(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimRight(path, "/")
	for _, e := range []struct{ suffix, api string }{
		{"/chat/completions", "chat"},
		{"/completions", "completions"},
		{"/embeddings", "embeddings"},
		{"/responses", "responses"},
		{"/messages", "messages"},
	} {
		if strings.HasSuffix(path, e.suffix) {
			return e.api
		}
	}
	return ""
}

// Limits of a Tap.
const (
	// MaxBody is the most of a whole (non-streamed) response a Tap keeps
	// to read its usage from; a longer body is not read.
	MaxBody = 8 << 20
	// MaxEventLine is the longest SSE line a Tap reads; longer lines
	// (a big delta) are skipped, which loses no usage: usage events are
	// short.
	MaxEventLine = 1 << 20
)

// Tap reads usage from a copy of a response body as it is relayed. It is
// an io.Writer that never fails: give it what the client is sent, in any
// pieces. A stream (text/event-stream) is read line by line as it comes;
// a whole body is kept (at most MaxBody) and read by Result. Not safe for
// concurrent use.
type Tap struct {
	stream   bool
	gzip     bool
	buf      []byte // the whole body, or the SSE line being read
	over     bool   // the body or the current line passed its limit
	usage    Usage
	found    bool
	model    string
	unparsed string // why the body could not be read
}

// NewTap returns a Tap for a response with the given Content-Type and
// Content-Encoding. A stream must not be encoded (the broker asks for
// identity); a whole body may be gzip, decoded by Result. Any other
// encoding is not read (Result says why).
func NewTap(contentType, contentEncoding string) *Tap {
	t := &Tap{stream: strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")}
	switch enc := strings.ToLower(strings.TrimSpace(contentEncoding)); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		if t.stream {
			t.unparsed = "the stream is " + enc + "-encoded"
		}
		t.gzip = true
	default:
		t.unparsed = "the body is " + enc + "-encoded"
	}
	return t
}

// Stream reports whether the response is an event stream.
func (t *Tap) Stream() bool { return t.stream }

// Write implements io.Writer; it always takes all of p.
func (t *Tap) Write(p []byte) (int, error) {
	n := len(p)
	if t.unparsed != "" {
		return n, nil
	}
	if !t.stream {
		if !t.over {
			if len(t.buf)+len(p) > MaxBody {
				t.over, t.buf = true, nil
			} else {
				t.buf = append(t.buf, p...)
			}
		}
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if !t.over {
			if len(t.buf)+len(part) > MaxEventLine {
				t.over, t.buf = true, t.buf[:0]
			} else {
				t.buf = append(t.buf, part...)
			}
		}
		if i < 0 {
			break
		}
		if !t.over {
			t.line(bytes.TrimRight(t.buf, "\r"))
		}
		t.buf, t.over = t.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}

// line reads one SSE line.
func (t *Tap) line(l []byte) {
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if t.model == "" {
		t.model = ModelOf(data)
	}
	if len(data) > 0 && data[0] == '{' && hasUsageObject(data) {
		t.found = true
		t.usage.FromEvent(data)
	}
}

// Result returns the usage read, the model the response named ("" if
// none), and, when no usage was found, why ("" when it was).
func (t *Tap) Result() (u Usage, model, why string) {
	if t.unparsed != "" {
		return Usage{}, "", t.unparsed
	}
	if t.stream {
		if len(t.buf) > 0 && !t.over { // a last line without its newline
			t.line(bytes.TrimRight(t.buf, "\r"))
			t.buf = t.buf[:0]
		}
		if !t.found {
			return Usage{}, t.model, "the stream had no usage event"
		}
		return t.usage, t.model, ""
	}
	if t.over {
		return Usage{}, "", "the body is longer than the metered limit"
	}
	body := t.buf
	if t.gzip {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return Usage{}, "", "the gzip body cannot be decoded"
		}
		body, err = io.ReadAll(io.LimitReader(zr, MaxBody+1))
		if err != nil || len(body) > MaxBody {
			return Usage{}, "", "the gzip body cannot be decoded within the metered limit"
		}
	}
	model = ModelOf(bytes.TrimSpace(body))
	if !t.usage.FromBody(body) {
		return Usage{}, model, "the body has no usage"
	}
	return t.usage, model, ""
}
