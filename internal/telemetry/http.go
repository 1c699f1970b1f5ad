package telemetry

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys wardend sets (the http.* and client.* ones are
// OpenTelemetry's semantic conventions).
const (
	AttrMethod    = attribute.Key("http.request.method")
	AttrRoute     = attribute.Key("http.route")
	AttrStatus    = attribute.Key("http.response.status_code")
	AttrClient    = attribute.Key("client.address")
	AttrDoor      = attribute.Key("warden.door")
	AttrPrincipal = attribute.Key("warden.principal_id")
	AttrSandbox   = attribute.Key("warden.sandbox_id")
)

// Classify names a request's door (api, e2b, envd, mcp, llm, local) and,
// when it knows it already, its route ("" leaves it to the door: Route).
type Classify func(r *http.Request) (door, route string)

// Handler wraps next in a server span per request: the W3C traceparent and
// tracestate of the request, when present, make it a child of the
// client's span. The span is named "METHOD route" once the route is known
// (from classify, or set by the door with Route; never the raw path, which
// holds ids), and carries the method, route, status code, door, client
// address and, where the door sets them, the principal and the sandbox.
// While tracing is off (when Handler is called) it returns next itself.
func Handler(classify Classify, next http.Handler) http.Handler {
	s := cur.Load()
	if s == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		door, route := classify(r)
		ctx := s.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		name := r.Method
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs, AttrMethod.String(methodName(r.Method)), AttrDoor.String(door))
		if route != "" {
			name += " " + route
			attrs = append(attrs, AttrRoute.String(route))
		}
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			attrs = append(attrs, AttrClient.String(host))
		}
		ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				span.SetStatus(codes.Error, "the handler aborted the response")
				span.End()
				panic(p)
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK // nothing written: net/http sends 200
			}
			span.SetAttributes(AttrStatus.Int(status))
			if status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			span.End()
		}()
		next.ServeHTTP(rec, r.WithContext(ctx))
	})
}

// methodName is the method for http.request.method: a known one, or
// _OTHER (the convention: the method is client input).
func methodName(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// Route names the request span of ctx after its route: pattern is a
// ServeMux pattern ("POST /v1/sandboxes/{id}") or a route without a method
// (the request's method is then used). It never takes a raw path.
func Route(ctx context.Context, method, pattern string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	route := pattern
	if m, p, ok := strings.Cut(pattern, " "); ok {
		method, route = m, p
	}
	span.SetName(method + " " + route)
	span.SetAttributes(AttrRoute.String(route))
}

// SetDoor records which door served the request span of ctx.
func SetDoor(ctx context.Context, door string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(AttrDoor.String(door))
	}
}

// SetPrincipal records the authenticated principal on ctx's span.
func SetPrincipal(ctx context.Context, id string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() && id != "" {
		span.SetAttributes(AttrPrincipal.String(id))
	}
}

// SetSandbox records the sandbox a request acts on on ctx's span.
func SetSandbox(ctx context.Context, id string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() && id != "" {
		span.SetAttributes(AttrSandbox.String(id))
	}
}

// recorder records the response's status code. It passes Flush, Hijack
// and (through Unwrap, for http.ResponseController) everything else on.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush implements http.Flusher (some handlers assert it directly).
func (r *recorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker (WebSocket upgrades).
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
