package llmusage

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

// Recorded provider bodies (the shapes of internal/llmgw's and
// test/integration's fake providers, which follow the real APIs).
const (
	openaiChat = `{"id":"c0","object":"chat.completion","model":"gpt-4o-mini-2024","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`

	openaiEmbeddings = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`

	openaiStream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}\n\n" +
		"data: [DONE]\n\n"

	openaiResponsesStream = "event: response.created\r\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"model\":\"gpt-4.1\",\"usage\":null}}\r\n\r\n" +
		"event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\r\n\r\n" +
		"event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"model\":\"gpt-4.1\",\"usage\":{\"input_tokens\":30,\"output_tokens\":4,\"total_tokens\":34}}}\r\n\r\n"

	anthropicMessage = `{"id":"msg_0","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":20,"cache_read_input_tokens":4,"output_tokens":9}}`

	anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-x\",\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":4,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// feed writes body to a new tap in pieces of n bytes.
func feed(ct, enc string, body []byte, n int) *Tap {
	t := NewTap(ct, enc)
	for len(body) > 0 {
		k := min(n, len(body))
		if w, err := t.Write(body[:k]); w != k || err != nil {
			panic("tap refused a write")
		}
		body = body[k:]
	}
	return t
}

func TestTap(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		in, out        int64
		model          string
	}{
		{"openai chat", "application/json", openaiChat, 12, 5, "gpt-4o-mini-2024"},
		{"openai embeddings", "application/json; charset=utf-8", openaiEmbeddings, 8, 0, "text-embedding-3-small"},
		{"openai chat stream", "text/event-stream; charset=utf-8", openaiStream, 12, 7, "gpt-4o-mini-2024"},
		{"openai responses stream (CRLF)", "text/event-stream", openaiResponsesStream, 30, 4, "gpt-4.1"},
		{"anthropic message", "application/json", anthropicMessage, 24, 9, "claude-x"},
		{"anthropic stream", "text/event-stream", anthropicStream, 24, 9, "claude-x"},
	} {
		for _, n := range []int{1, 7, 64, 1 << 20} {
			tap := feed(tc.ct, "", []byte(tc.body), n)
			u, model, why := tap.Result()
			if why != "" || u.In() != tc.in || u.Out() != tc.out || model != tc.model {
				t.Errorf("%s in pieces of %d: usage %+v (in %d, out %d), model %q, why %q; want in %d, out %d, model %q",
					tc.name, n, u, u.In(), u.Out(), model, why, tc.in, tc.out, tc.model)
			}
		}
	}
}

func TestTapGzipAndLimits(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(anthropicMessage))
	zw.Close()
	if u, model, why := feed("application/json", "gzip", zb.Bytes(), 5).Result(); why != "" || u.In() != 24 || u.Out() != 9 || model != "claude-x" {
		t.Errorf("gzip body: %+v %q %q", u, model, why)
	}
	if _, _, why := feed("application/json", "br", []byte(anthropicMessage), 5).Result(); !strings.Contains(why, "br-encoded") {
		t.Errorf("br body: why %q, want it named as not read", why)
	}
	if _, _, why := feed("text/event-stream", "gzip", []byte(openaiStream), 5).Result(); why == "" {
		t.Error("a gzip stream was read as if it were plain")
	}
	// A body over the limit is not read (and not kept).
	big := `{"pad":"` + strings.Repeat("x", MaxBody) + `","usage":{"prompt_tokens":1}}`
	tap := feed("application/json", "", []byte(big), 1<<16)
	if _, _, why := tap.Result(); why == "" || len(tap.buf) != 0 {
		t.Errorf("an over-long body: why %q, kept %d bytes", why, len(tap.buf))
	}
	// An over-long stream line is skipped; the usage after it still counts.
	long := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("y", MaxEventLine) + "\"}}]}\n\n"
	tap = feed("text/event-stream", "", []byte(long+openaiStream), 4096)
	if u, _, why := tap.Result(); why != "" || u.In() != 12 || u.Out() != 7 || cap(tap.buf) > 2*MaxEventLine {
		t.Errorf("stream with a long line: %+v %q (buffer %d)", u, why, cap(tap.buf))
	}
	// An OpenAI chat stream the client did not ask usage for has none.
	noUsage := strings.Replace(openaiStream, `"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}`, `"choices":[]`, 1)
	if _, model, why := feed("text/event-stream", "", []byte(noUsage), 9).Result(); why == "" || model != "gpt-4o-mini-2024" {
		t.Errorf("stream without usage: model %q, why %q", model, why)
	}
}

func TestRequestModelAndAPI(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"gpt-4o","messages":[]}`:                              "gpt-4o",
		`{"messages":[{"role":"user","content":"a}"}], "model" : "m2"}`: "m2",
		`{"stream":true,"max_tokens":5,"model":"claude-3-5-haiku","messages":[{"role":"user","content":"` + strings.Repeat("z", 100): "claude-3-5-haiku",
		`{"messages":[{"role":"user","content":"cut here`: "",
		`[1,2]`:               "",
		`{"model":7}`:         "",
		``:                    "",
		`{"model":"a\u0062"}`: "ab",
	} {
		if got := RequestModel([]byte(body)); got != want {
			t.Errorf("RequestModel(%.60q) = %q, want %q", body, got, want)
		}
	}
	for p, want := range map[string]string{
		"/v1/chat/completions":            "chat",
		"/openai/v1/chat/completions?x=1": "chat",
		"/v1/completions":                 "completions",
		"/v1/embeddings":                  "embeddings",
		"/v1/responses":                   "responses",
		"/v1/messages":                    "messages",
		"/v1/messages/count_tokens":       "",
		"/v1/models":                      "",
		"/v1/messages/batches":            "",
	} {
		if got := API(p); got != want {
			t.Errorf("API(%q) = %q, want %q", p, got, want)
		}
	}
}
