package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/warden-sandbox/warden/internal/config"
)

// recording installs an SDK provider that records ended spans in memory.
func recording(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	restore := Install(tp)
	t.Cleanup(func() { restore(); tp.Shutdown(context.Background()) })
	return sr
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestResolve: the config wins, then the traces variable, then the
// generic one, then the default; a base URL gets /v1/traces, a full
// traces URL from the environment is used as it is.
func TestResolve(t *testing.T) {
	ratio := 0.25
	cases := []struct {
		name    string
		cfg     config.TracingConfig
		env     map[string]string
		url     string
		headers map[string]string
		service string
		ratio   float64
	}{
		{"defaults", config.TracingConfig{Enabled: true}, nil, "http://localhost:4318/v1/traces", map[string]string{}, "wardend", 1},
		{"config wins", config.TracingConfig{Endpoint: "https://col.example:4318", Headers: map[string]string{"x-a": "1"}, ServiceName: "w1", SampleRatio: &ratio},
			map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env:1/x", "OTEL_EXPORTER_OTLP_HEADERS": "x-b=2", "OTEL_SERVICE_NAME": "envname"},
			"https://col.example:4318/v1/traces", map[string]string{"x-a": "1"}, "w1", 0.25},
		{"config path kept", config.TracingConfig{Endpoint: "http://col:4318/custom/traces"}, nil, "http://col:4318/custom/traces", map[string]string{}, "wardend", 1},
		{"traces env over generic", config.TracingConfig{Enabled: true},
			map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:2",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_HEADERS": "b=2", "OTEL_SERVICE_NAME": "envname"},
			"http://t:1/v1/traces", map[string]string{"a": "1"}, "envname", 1},
		{"generic env", config.TracingConfig{Enabled: true},
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:2", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%20ecret, b = 2 "},
			"http://g:2/v1/traces", map[string]string{"api-key": "s ecret", "b": "2"}, "wardend", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(tc.cfg, envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if s.URL != tc.url || s.ServiceName != tc.service || s.SampleRatio != tc.ratio || len(s.Headers) != len(tc.headers) {
				t.Fatalf("got %+v", s)
			}
			for k, v := range tc.headers {
				if s.Headers[k] != v {
					t.Fatalf("header %s: %q, want %q", k, s.Headers[k], v)
				}
			}
		})
	}
	for _, bad := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:pw@collector:4318"},
		{"OTEL_EXPORTER_OTLP_HEADERS": "novalue-secret-token"},
	} {
		_, err := Resolve(config.TracingConfig{Enabled: true}, envOf(bad))
		if err == nil {
			t.Fatalf("%v: no error", bad)
		}
		if strings.Contains(err.Error(), "secret-token") || strings.Contains(err.Error(), "pw@") {
			t.Fatalf("the error quotes a credential: %v", err)
		}
	}
	if p, err := Setup(context.Background(), config.TracingConfig{}, envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}), slog.Default()); p != nil || err != nil || Enabled() {
		t.Fatalf("the environment alone turned tracing on: %v %v", p, err)
	}
}

// TestOffCostsNothing: with tracing off, Start allocates nothing and
// returns a span that records nothing, Handler is the handler itself and
// Inject writes no header.
func TestOffCostsNothing(t *testing.T) {
	if Enabled() {
		t.Fatal("tracing is on in a fresh process")
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, span := Start(ctx, "x")
		span.End()
	}); n != 0 {
		t.Fatalf("Start with tracing off: %v allocations", n)
	}
	if _, span := Start(ctx, "x"); span.IsRecording() {
		t.Fatal("a recording span with tracing off")
	}
	var h http.Handler = plainHandler{}
	if got := Handler(func(*http.Request) (string, string) { return "api", "" }, h); got != h {
		t.Fatal("Handler wrapped the handler with tracing off")
	}
	hdr := http.Header{}
	Inject(ctx, hdr)
	if len(hdr) != 0 {
		t.Fatalf("Inject with tracing off: %v", hdr)
	}
}

// TestHandler: a request with a traceparent continues the client's trace;
// the span is named after the route the door sets, with method, route,
// status, door, principal and sandbox; a child span started in the
// handler is its child; Flush and Hijack still reach the connection; a
// 5xx marks the span failed.
func TestHandler(t *testing.T) {
	sr := recording(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	var childSC trace.SpanContext
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		Route(r.Context(), r.Method, "POST /v1/sandboxes/{id}/exec")
		SetPrincipal(r.Context(), "usr_1")
		SetSandbox(r.Context(), r.PathValue("id"))
		_, child := Start(r.Context(), "govern.decide")
		childSC = child.SpanContext()
		child.End()
		w.WriteHeader(http.StatusCreated)
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("GET /hijack", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		brw.Flush()
		c.Close()
	})
	mux.HandleFunc("GET /fail", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	srv := httptest.NewServer(Handler(func(*http.Request) (string, string) { return "api", "" }, mux))
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/v1/sandboxes/sb-abc/exec", nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/hijack")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("hijacked response %q", b)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/fail")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	spans := sr.Ended()
	var server sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "POST /v1/sandboxes/{id}/exec" {
			server = s
		}
	}
	if server == nil {
		t.Fatalf("no server span named after the route: %v", names(spans))
	}
	if server.SpanKind() != trace.SpanKindServer || server.SpanContext().TraceID().String() != traceID ||
		server.Parent().SpanID().String() != parentID || !server.Parent().IsRemote() {
		t.Fatalf("server span %s kind %v trace %s parent %s", server.Name(), server.SpanKind(), server.SpanContext().TraceID(), server.Parent().SpanID())
	}
	a := attrs(server)
	want := map[attribute.Key]string{AttrMethod: "POST", AttrRoute: "/v1/sandboxes/{id}/exec", AttrDoor: "api",
		AttrPrincipal: "usr_1", AttrSandbox: "sb-abc", AttrClient: "127.0.0.1"}
	for k, v := range want {
		if a[k].Emit() != v {
			t.Errorf("%s = %q, want %q", k, a[k].Emit(), v)
		}
	}
	if a[AttrStatus].AsInt64() != 201 {
		t.Errorf("status %v", a[AttrStatus])
	}
	if childSC.TraceID().String() != traceID {
		t.Errorf("the child span is in trace %s", childSC.TraceID())
	}
	for _, s := range spans {
		if s.Name() == "govern.decide" && s.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("the child's parent is %s, not the server span", s.Parent().SpanID())
		}
		if s.Name() == "GET" && attrs(s)[AttrStatus].AsInt64() == 502 && s.Status().Code.String() != "Error" {
			t.Errorf("a 502 left the span %v", s.Status())
		}
	}
	if len(spans) != 4 {
		t.Errorf("spans: %v", names(spans))
	}
	// Inject writes the current span's context.
	h := http.Header{}
	ctx := trace.ContextWithSpanContext(context.Background(), server.SpanContext())
	Inject(ctx, h)
	if tp := h.Get("traceparent"); !strings.Contains(tp, traceID) || !strings.Contains(tp, server.SpanContext().SpanID().String()) {
		t.Fatalf("traceparent %q", tp)
	}
	m := map[string]any{}
	InjectMap(ctx, m)
	if m["traceparent"] != h.Get("traceparent") {
		t.Fatalf("InjectMap: %v", m)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// TestSetupExports: Setup's provider posts OTLP/HTTP protobuf with the
// configured headers and the resource (service.name, service.version,
// host.name) to the collector's /v1/traces, and Shutdown flushes what is
// buffered and turns tracing off.
func TestSetupExports(t *testing.T) {
	var mu sync.Mutex
	var got []*collpb.ExportTraceServiceRequest
	var auth, path, ctype string
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &collpb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			t.Errorf("not an ExportTraceServiceRequest: %v", err)
		}
		mu.Lock()
		got = append(got, req)
		auth, path, ctype = r.Header.Get("X-Collector-Auth"), r.URL.Path, r.Header.Get("Content-Type")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(nil)
	}))
	defer col.Close()
	p, err := Setup(context.Background(), config.TracingConfig{Endpoint: col.URL, ServiceName: "wardend-test",
		Headers: map[string]string{"X-Collector-Auth": "tok"}}, envOf(nil), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("tracing is off after Setup")
	}
	_, span := Start(context.Background(), "unit.span")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if Enabled() {
		t.Fatal("tracing is on after Shutdown")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || path != "/v1/traces" || auth != "tok" || ctype != "application/x-protobuf" {
		t.Fatalf("exports %d to %s (auth %q, type %q)", len(got), path, auth, ctype)
	}
	rs := got[0].ResourceSpans[0]
	res := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	if res["service.name"] != "wardend-test" || res["service.version"] == "" || res["host.name"] == "" {
		t.Fatalf("resource %v", res)
	}
	if s := rs.ScopeSpans[0]; s.Scope.Name != ScopeName || s.Spans[0].Name != "unit.span" {
		t.Fatalf("scope %s span %s", s.Scope.Name, s.Spans[0].Name)
	}
}

type plainHandler struct{}

func (plainHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// The recorder must keep the interfaces handlers assert.
var (
	_ http.Flusher  = (*recorder)(nil)
	_ http.Hijacker = (*recorder)(nil)
)
