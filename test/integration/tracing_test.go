package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// otlpCollector is a local OTLP/HTTP collector: it decodes each
// ExportTraceServiceRequest posted to /v1/traces and keeps the spans, the
// raw bytes and the headers it got.
type otlpCollector struct {
	hs      *httptest.Server
	mu      sync.Mutex
	raw     bytes.Buffer
	spans   []*tracepb.Span
	res     map[string]string // the resource's string attributes
	auth    []string          // X-Collector-Auth of each export
	badBody error
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{res: map[string]string{}}
	c.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := &collpb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.badBody = err
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.raw.Write(b)
		c.auth = append(c.auth, r.Header.Get("X-Collector-Auth"))
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				c.res[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				c.spans = append(c.spans, ss.Spans...)
			}
		}
		out, _ := proto.Marshal(&collpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(c.hs.Close)
	return c
}

func (c *otlpCollector) all() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			return fmt.Sprint(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			return fmt.Sprint(v.DoubleValue)
		}
		return kv.Value.String()
	}
	return ""
}

// findSpan returns the span named name in trace traceID.
func findSpan(spans []*tracepb.Span, traceID, name string) *tracepb.Span {
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) == traceID && s.Name == name {
			return s
		}
	}
	return nil
}

// childOf returns the span named name whose parent is parent.
func childOf(spans []*tracepb.Span, parent *tracepb.Span, name string) *tracepb.Span {
	for _, s := range spans {
		if s.Name == name && bytes.Equal(s.ParentSpanId, parent.SpanId) && bytes.Equal(s.TraceId, parent.TraceId) {
			return s
		}
	}
	return nil
}

func spanNames(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+"("+hex.EncodeToString(s.TraceId)[:6]+")")
	}
	return out
}

// traced is a JSON call of the native API with a traceparent.
func traced(t *testing.T, d *daemon, key, method, path, traceparent string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("traceparent", traceparent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// traceparentT sends the key and a traceparent on every request of an MCP
// client: call on the one that carries tools/call, other on the rest (so
// the test sees which request's span a tool call hangs off).
type traceparentT struct{ key, call, other string }

func (k traceparentT) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+k.key)
	tp := k.other
	if bytes.Contains(body, []byte(`"tools/call"`)) {
		tp = k.call
	}
	r.Header.Set("traceparent", tp)
	return http.DefaultTransport.RoundTrip(r)
}

// TestTracing drives one real wardend with tracing on, exporting to a
// local OTLP/HTTP collector (docs/tracing.md): a sandbox's create, exec
// and kill, an LLM gateway call and an MCP tool call, each sent with a
// W3C traceparent. Each request's server span continues the client's
// trace and is named after its route with the principal and sandbox;
// the governed decision, the lifecycle operations, the LLM call and the
// tool call are its children; the LLM provider and the MCP upstream get a
// traceparent of the same trace; the collector gets the configured header
// and the resource; no key, secret, prompt, argument or env value appears
// in anything exported.
func TestTracing(t *testing.T) {
	const (
		providerKey   = "sk-trace-provider-key-77a1"
		upstreamToken = "trace-upstream-token-31c"
		collectorTok  = "collector-token-e58"
		envSecret     = "env-secret-value-9f3b"
		promptText    = "prompt-never-traced-4d2"
		argText       = "argument-never-traced-8e1"
		cmdMarker     = "command-never-traced-0c7"
	)
	col := newOTLPCollector(t)
	var llmMu sync.Mutex
	var llmTP []string
	llmUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		llmMu.Lock()
		llmTP = append(llmTP, r.Header.Get("traceparent"))
		llmMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","model":"gpt-trace","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150}}`)
	}))
	defer llmUp.Close()
	var mcpMu sync.Mutex
	var mcpTP, mcpMeta []string
	msrv := mcp.NewServer(&mcp.Implementation{Name: "trace-upstream", Version: "1"}, nil)
	msrv.AddTool(&mcp.Tool{Name: "echo", Description: "Echo the text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mcpMu.Lock()
			tp, _ := req.Params.Meta["traceparent"].(string)
			mcpMeta = append(mcpMeta, tp)
			mcpMu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(req.Params.Arguments)}}}, nil
		})
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return msrv }, nil)
	mcpUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			mcpMu.Lock()
			mcpTP = append(mcpTP, tp)
			mcpMu.Unlock()
		}
		mh.ServeHTTP(w, r)
	}))
	defer mcpUp.Close()

	// First run: the provider key in the secrets store (the config names
	// its id).
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	ctx := context.Background()
	sec, err := d.client(t, d.adminKey).PutSecret(ctx, "openai", providerKey)
	if err != nil {
		t.Fatal(err)
	}
	d.stop(syscall.SIGTERM)

	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	cfg := fmt.Sprintf(`tracing:
  endpoint: %q
  headers: {X-Collector-Auth: %q}
  service_name: wardend-it
llm:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
  providers:
    - {name: openai, kind: openai, base_url: %q, key_secret: %q}
  prices:
    - {model: "gpt-trace", input: 2, output: 8}
mcp:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
`, col.hs.URL, collectorTok, llmUp.URL+"/v1", sec.ID)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, state, run, "--config", conf)
	if !strings.Contains(d.log.String(), "tracing on") {
		t.Fatalf("wardend did not say tracing is on:\n%s", d.log)
	}
	admin := d.client(t, d.adminKey)
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "trace-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "trace",
		Scopes: []string{"sandboxes:create", "sandboxes:read", "sandboxes:exec", "sandboxes:delete", "llm:use", "mcp:use"}})
	if err != nil {
		t.Fatal(err)
	}
	upSec, err := admin.PutSecret(ctx, "trace-upstream", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}

	tp := func(i int) (traceID, parent, header string) {
		traceID = fmt.Sprintf("%032x", 0xabc000+i)
		parent = fmt.Sprintf("%016x", 0xdef000+i)
		return traceID, parent, "00-" + traceID + "-" + parent + "-01"
	}
	createT, createP, h := tp(1)
	st, body := traced(t, d, ak.Key, "POST", "/v1/sandboxes", h, map[string]any{"env": map[string]string{"TRACE_ENV": envSecret}})
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, body)
	}
	var sb struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &sb)
	execT, _, h := tp(2)
	if st, body := traced(t, d, ak.Key, "POST", "/v1/sandboxes/"+sb.ID+"/exec", h,
		map[string]any{"command": "echo " + cmdMarker + " $TRACE_ENV"}); st != http.StatusOK || !strings.Contains(string(body), `"exit_code":0`) {
		t.Fatalf("exec: %d %s", st, body)
	}
	killT, _, h := tp(3)
	if st, body := traced(t, d, ak.Key, "DELETE", "/v1/sandboxes/"+sb.ID, h, nil); st/100 != 2 {
		t.Fatalf("kill: %d %s", st, body)
	}
	llmT, _, h := tp(4)
	if st, body := traced(t, d, ak.Key, "POST", "/llm/openai/v1/chat/completions", h,
		map[string]any{"model": "gpt-trace", "messages": []any{map[string]any{"role": "user", "content": promptText}}}); st != 200 {
		t.Fatalf("llm call: %d %s", st, body)
	}

	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "tr", "kind": "remote",
		"spec": map[string]any{"url": mcpUp.URL, "auth": map[string]any{"required": true}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/connectors/tr/credentials", map[string]any{"secret_id": upSec.ID, "shared": true})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "trs",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "tr", "tools": []any{map[string]any{"name": "echo"}}}}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/trs/grants/"+agent.ID, nil)
	mcpT, _, h := tp(5)
	_, _, otherH := tp(6)
	mc := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := mc.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp/v/trs",
		HTTPClient: &http.Client{Transport: traceparentT{ak.Key, h, otherH}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, d.log)
	}
	defer cs.Close()
	mcpTools(t, cs) // the gateway meets the tool, pending approval
	if got := approvePending(t, d, "tr"); len(got) != 1 {
		t.Fatalf("approved %v", got)
	}
	waitTools(t, cs, func(got []string) bool { return slices.Contains(got, "echo") })
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": argText}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %v %+v", err, res)
	}
	cs.Close()
	// The builtin connector calls the native API in process: that call
	// gets a server span of its own under the tool call's span.
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "warden", "kind": "builtin", "spec": map[string]any{}})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "trb",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "warden"}}}})
	adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/trb/grants/"+agent.ID, nil)
	builtinT, _, h := tp(7)
	bs, err := mc.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp/v/trb",
		HTTPClient: &http.Client{Transport: traceparentT{ak.Key, h, otherH}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, d.log)
	}
	defer bs.Close()
	res, err = bs.CallTool(cctx, &mcp.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_create: %v %s", err, mcpText(res))
	}
	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	json.Unmarshal([]byte(mcpText(res)), &created)
	if err := admin.KillSandbox(ctx, created.SandboxID); err != nil {
		t.Fatal(err)
	}
	bs.Close()

	// Stopping the daemon flushes what is buffered.
	d.stop(syscall.SIGTERM)
	spans := col.all()
	col.mu.Lock()
	raw, auths, res0, bad := col.raw.String(), slices.Clone(col.auth), col.res, col.badBody
	col.mu.Unlock()
	if bad != nil || len(spans) == 0 {
		t.Fatalf("collector: %d spans, bad body %v\n%s", len(spans), bad, d.log)
	}
	for _, a := range auths {
		if a != collectorTok {
			t.Fatalf("an export came with X-Collector-Auth %q", a)
		}
	}
	if res0["service.name"] != "wardend-it" || res0["service.version"] == "" || res0["host.name"] == "" {
		t.Fatalf("resource: %v", res0)
	}

	// create: the server span continues the client's trace.
	srvCreate := findSpan(spans, createT, "POST /v1/sandboxes")
	if srvCreate == nil {
		t.Fatalf("no server span for the create: %v", spanNames(spans))
	}
	if hex.EncodeToString(srvCreate.ParentSpanId) != createP || srvCreate.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("create span: parent %x kind %v", srvCreate.ParentSpanId, srvCreate.Kind)
	}
	for k, v := range map[string]string{"http.request.method": "POST", "http.route": "/v1/sandboxes", "http.response.status_code": "201",
		"warden.principal_id": agent.ID, "warden.sandbox_id": sb.ID, "warden.door": "api"} {
		if got := spanAttr(srvCreate, k); got != v {
			t.Errorf("create span %s = %q, want %q", k, got, v)
		}
	}
	if c := childOf(spans, srvCreate, "sandbox.create"); c == nil || spanAttr(c, "warden.sandbox_id") != sb.ID ||
		spanAttr(c, "warden.sandbox.backend") != "native" || spanAttr(c, "warden.sandbox.template") == "" {
		t.Errorf("sandbox.create under the request: %v", c)
	}
	if g := childOf(spans, srvCreate, "govern.decide"); g == nil || spanAttr(g, "warden.govern.kind") != "sandbox.create" {
		t.Errorf("govern.decide under the create: %v", g)
	}

	// exec: the governed decision is the request span's child.
	srvExec := findSpan(spans, execT, "POST /v1/sandboxes/{id}/exec")
	if srvExec == nil {
		t.Fatalf("no server span for the exec: %v", spanNames(spans))
	}
	if spanAttr(srvExec, "warden.sandbox_id") != sb.ID || spanAttr(srvExec, "warden.principal_id") != agent.ID {
		t.Errorf("exec span attributes: %v", srvExec.Attributes)
	}
	g := childOf(spans, srvExec, "govern.decide")
	if g == nil || spanAttr(g, "warden.govern.kind") != "exec" || spanAttr(g, "warden.govern.outcome") != "allow" {
		t.Fatalf("govern.decide under the exec: %v", g)
	}

	// kill: a lifecycle span under the request.
	srvKill := findSpan(spans, killT, "DELETE /v1/sandboxes/{id}")
	if srvKill == nil || childOf(spans, srvKill, "sandbox.kill") == nil {
		t.Fatalf("kill spans: %v", spanNames(spans))
	}

	// LLM: the gateway's client span, with GenAI attributes; the provider
	// got a traceparent of the same trace whose parent is that span.
	srvLLM := findSpan(spans, llmT, "POST /llm/{provider}/{endpoint...}")
	if srvLLM == nil {
		t.Fatalf("no server span for the LLM call: %v", spanNames(spans))
	}
	chat := childOf(spans, srvLLM, "chat gpt-trace")
	if chat == nil || chat.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("no chat span under the LLM request: %v", spanNames(spans))
	}
	for k, v := range map[string]string{"gen_ai.system": "openai", "gen_ai.request.model": "gpt-trace", "gen_ai.operation.name": "chat",
		"gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "50", "warden.llm.outcome": "success", "warden.llm.cost_micros": "600"} {
		if got := spanAttr(chat, k); got != v {
			t.Errorf("chat span %s = %q, want %q", k, got, v)
		}
	}
	if childOf(spans, chat, "govern.decide") == nil {
		t.Errorf("no govern.decide under the chat span")
	}
	llmMu.Lock()
	wantTP := "00-" + llmT + "-" + hex.EncodeToString(chat.SpanId) + "-01"
	if len(llmTP) != 1 || llmTP[0] != wantTP {
		t.Errorf("the provider got traceparent %v, want %s", llmTP, wantTP)
	}
	llmMu.Unlock()

	// MCP: a client span for the tool call under the request's span; the
	// upstream got the trace in its HTTP header and in _meta.
	var call *tracepb.Span
	for _, s := range spans {
		if s.Name == "tools/call echo" && hex.EncodeToString(s.TraceId) == mcpT {
			call = s
		}
	}
	if call == nil || call.Kind != tracepb.Span_SPAN_KIND_CLIENT || spanAttr(call, "warden.mcp.connector") != "tr" ||
		spanAttr(call, "gen_ai.tool.name") != "echo" || spanAttr(call, "warden.mcp.outcome") != "success" {
		t.Fatalf("tool call span: %v (spans %v)", call, spanNames(spans))
	}
	var parent *tracepb.Span
	for _, s := range spans {
		if bytes.Equal(s.SpanId, call.ParentSpanId) {
			parent = s
		}
	}
	if parent == nil || parent.Name != "POST /mcp/v/{server}" || spanAttr(parent, "warden.principal_id") != agent.ID {
		t.Fatalf("the tool call's parent: %v", parent)
	}
	mcpMu.Lock()
	if !slices.ContainsFunc(mcpTP, func(s string) bool { return strings.Contains(s, mcpT) }) ||
		len(mcpMeta) != 1 || !strings.Contains(mcpMeta[0], mcpT+"-"+hex.EncodeToString(call.SpanId)) {
		t.Errorf("the MCP upstream got traceparents %v and _meta %v", mcpTP, mcpMeta)
	}
	mcpMu.Unlock()

	bcall := findSpan(spans, builtinT, "tools/call sandbox_create")
	if bcall == nil {
		t.Fatalf("no span for the builtin tool call: %v", spanNames(spans))
	}
	if in := childOf(spans, bcall, "POST /v1/sandboxes"); in == nil || spanAttr(in, "warden.door") != "builtin" ||
		spanAttr(in, "warden.sandbox_id") != created.SandboxID || childOf(spans, in, "sandbox.create") == nil {
		t.Errorf("the builtin connector's API call under the tool call: %v", in)
	}

	// Span names carry no ids.
	for _, s := range spans {
		if strings.Contains(s.Name, "sb-") || strings.Contains(s.Name, agent.ID) {
			t.Errorf("span name %q carries an id", s.Name)
		}
	}
	// Nothing secret in what was exported.
	for _, secret := range []string{d.adminKey, ak.Key, providerKey, upstreamToken, collectorTok, envSecret, promptText, argText, cmdMarker} {
		if strings.Contains(raw, secret) {
			t.Errorf("the exported spans contain %q", secret)
		}
	}
}
