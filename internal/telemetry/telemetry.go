// Package telemetry is wardend's OpenTelemetry tracing (docs/tracing.md):
// it builds a TracerProvider that exports spans over OTLP/HTTP from the
// config's tracing block (Setup), installs it for the whole process, and
// flushes and removes it when the daemon stops.
//
// Tracing is off by default. While it is off, Start returns the context it
// was given and a no-op span without allocating, Handler returns the
// handler it wraps, and Inject adds nothing: instrumented code costs an
// atomic load. Callers that would build attributes check Enabled first.
//
// Spans never carry secrets, API keys, request or response bodies,
// prompts, tool arguments or environment values: only names, ids,
// outcomes, sizes and counts (see docs/tracing.md for the full list).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/version"
)

// ScopeName is the instrumentation scope of every span wardend makes.
const ScopeName = "github.com/warden-sandbox/warden"

// DefaultEndpoint is the collector's base URL when neither the config nor
// the environment names one.
const DefaultEndpoint = "http://localhost:4318"

// state is the installed tracer; nil while tracing is off.
type state struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

var cur atomic.Pointer[state]

// propagator reads and writes W3C traceparent and tracestate.
var propagator = propagation.TraceContext{}

// noSpan is the no-op span Start returns while tracing is off.
var noSpan = trace.SpanFromContext(context.Background())

// Enabled reports whether tracing is on.
func Enabled() bool { return cur.Load() != nil }

// Start starts a span named name as a child of ctx's span (a root span
// when ctx has none). While tracing is off it returns ctx and a no-op span.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := cur.Load()
	if s == nil {
		return ctx, noSpan
	}
	return s.tracer.Start(ctx, name, opts...)
}

// Install makes tp the process's tracer provider (tp nil: tracing off) and
// returns a function that restores the previous one. Setup calls it; tests
// install an SDK provider with an in-memory exporter.
func Install(tp trace.TracerProvider) (restore func()) {
	var s *state
	if tp != nil {
		s = &state{tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version.Version)), prop: propagator}
	}
	prev := cur.Swap(s)
	return func() { cur.CompareAndSwap(s, prev) }
}

// Inject writes ctx's span context as traceparent (and tracestate) into h,
// so that an upstream's trace links to this one. Nothing is written while
// tracing is off or ctx has no valid span context.
func Inject(ctx context.Context, h http.Header) {
	s := cur.Load()
	if s == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	s.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// InjectMap is Inject into a map (MCP's _meta): traceparent and, when
// there is one, tracestate.
func InjectMap(ctx context.Context, m map[string]any) {
	s := cur.Load()
	if s == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	s.prop.Inject(ctx, c)
	for k, v := range c {
		m[k] = v
	}
}

// Provider is the tracer provider Setup built. Shutdown flushes the spans
// not yet exported and uninstalls it.
type Provider struct {
	tp       *sdktrace.TracerProvider
	restore  func()
	Endpoint string // the URL spans are posted to
}

// Shutdown exports what is buffered (within ctx) and turns tracing off.
// Safe on a nil Provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.restore()
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}

// Settings are the resolved settings of a tracing config (Resolve).
type Settings struct {
	URL         string // where spans are posted: the collector's /v1/traces
	Headers     map[string]string
	ServiceName string
	SampleRatio float64
	Timeout     time.Duration
}

// Resolve fills what cfg leaves unset from the environment (getenv), then
// from the defaults. The precedence, for each setting: the config, then
// the OTEL_EXPORTER_OTLP_TRACES_* variable, then the OTEL_EXPORTER_OTLP_*
// one, then the default.
func Resolve(cfg config.TracingConfig, getenv func(string) string) (Settings, error) {
	s := Settings{Headers: map[string]string{}, SampleRatio: 1, Timeout: 10 * time.Second}
	switch {
	case cfg.Endpoint != "":
		s.URL = tracesURL(cfg.Endpoint)
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		s.URL = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") // the full URL, as the spec says
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		s.URL = tracesURL(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	default:
		s.URL = tracesURL(DefaultEndpoint)
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := s.URL
		if strings.Contains(shown, "@") {
			shown = "(not shown: it has an @)" // it may hold a credential
		}
		return s, fmt.Errorf("tracing: endpoint %q is not an http:// or https:// URL", shown)
	}
	if u.User != nil {
		return s, errors.New("tracing: the endpoint must not carry credentials in the URL: use headers")
	}
	switch {
	case cfg.Headers != nil:
		for k, v := range cfg.Headers {
			s.Headers[k] = v
		}
	case getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS") != "":
		s.Headers, err = parseHeaders(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
	case getenv("OTEL_EXPORTER_OTLP_HEADERS") != "":
		s.Headers, err = parseHeaders(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	}
	if err != nil {
		return s, err
	}
	s.ServiceName = "wardend"
	if cfg.ServiceName != "" {
		s.ServiceName = cfg.ServiceName
	} else if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		s.ServiceName = v
	}
	if cfg.SampleRatio != nil {
		s.SampleRatio = *cfg.SampleRatio
	}
	if s.SampleRatio < 0 || s.SampleRatio > 1 {
		return s, fmt.Errorf("tracing: sample_ratio %v is not between 0 and 1", s.SampleRatio)
	}
	if cfg.Timeout > 0 {
		s.Timeout = cfg.Timeout
	}
	return s, nil
}

// tracesURL is a collector's traces URL from its base URL: /v1/traces is
// appended to a URL without a path.
func tracesURL(base string) string {
	u, err := url.Parse(base)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return base
	}
	u.Path = "/v1/traces"
	return u.String()
}

// parseHeaders parses the OTEL_EXPORTER_OTLP_HEADERS form:
// key1=value1,key2=value2 with URL-encoded values.
func parseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			// Never echo the value: it is usually a credential.
			return nil, errors.New("tracing: OTLP headers from the environment are not key=value pairs")
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP header %s: its value is not URL-encoded", k)
		}
		h[k] = dv
	}
	return h, nil
}

// Setup builds the tracer provider cfg asks for and installs it; it
// returns nil (tracing off) when cfg leaves tracing off. Export failures
// are logged on log at warn level, at most once a minute.
func Setup(ctx context.Context, cfg config.TracingConfig, getenv func(string) string, log *slog.Logger) (*Provider, error) {
	if !cfg.On() {
		return nil, nil
	}
	s, err := Resolve(cfg, getenv)
	if err != nil {
		return nil, err
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(s.URL), otlptracehttp.WithHeaders(s.Headers),
		otlptracehttp.WithTimeout(s.Timeout)}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	host, _ := os.Hostname()
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", s.ServiceName),
		attribute.String("service.version", version.Version),
		attribute.String("host.name", host)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.SampleRatio))))
	otel.SetErrorHandler(&errorLog{log: log})
	p := &Provider{tp: tp, restore: Install(tp), Endpoint: s.URL}
	log.Info("tracing on: exporting spans over OTLP/HTTP", "endpoint", s.URL, "service_name", s.ServiceName,
		"sample_ratio", s.SampleRatio)
	return p, nil
}

// errorLog logs the SDK's errors (failed exports) at most once a minute.
type errorLog struct {
	log  *slog.Logger
	last atomic.Int64
}

func (e *errorLog) Handle(err error) {
	now := time.Now().UnixNano()
	last := e.last.Load()
	if now-last < int64(time.Minute) || !e.last.CompareAndSwap(last, now) {
		return
	}
	e.log.Warn("tracing: spans not exported (further failures within a minute are not logged)", "err", err)
}
