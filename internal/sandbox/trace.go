package sandbox

import (
	"cmp"
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/telemetry"
	"github.com/warden-sandbox/warden/internal/template"
)

// Tracing of lifecycle operations (docs/tracing.md): each operation is a
// span "sandbox.<op>" (create, pause, resume, fork, kill, snapshot), the
// child of the request that asked for it, or a root span when the manager
// acts on its own (timeouts, idle pauses, lifetimes, retention, a sandbox
// that exited by itself), which then says why in warden.sandbox.trigger.

const (
	attrOp       = attribute.Key("warden.sandbox.op")
	attrBackend  = attribute.Key("warden.sandbox.backend")
	attrTemplate = attribute.Key("warden.sandbox.template")
	attrTrigger  = attribute.Key("warden.sandbox.trigger")
	attrReason   = attribute.Key("warden.sandbox.reason")
	attrCold     = attribute.Key("warden.sandbox.cold")
	attrCount    = attribute.Key("warden.sandbox.count")
	attrErrType  = attribute.Key("error.type")
)

type triggerKey struct{}

// auto marks ctx as the manager acting on its own for trigger (the
// lifecycle event: idle_pause, timeout_pause...), for the operation's
// span. Without tracing it returns ctx.
func auto(ctx context.Context, trigger string) context.Context {
	if !telemetry.Enabled() {
		return ctx
	}
	return context.WithValue(ctx, triggerKey{}, trigger)
}

// startOp starts the span of operation op on sandbox id ("" for a
// create). A no-op span while tracing is off.
func startOp(ctx context.Context, op, id string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, "")
	}
	attrs = append(attrs, attrOp.String(op))
	if id != "" {
		attrs = append(attrs, telemetry.AttrSandbox.String(id))
	}
	if t, ok := ctx.Value(triggerKey{}).(string); ok {
		attrs = append(attrs, attrTrigger.String(t))
	}
	return telemetry.Start(ctx, "sandbox."+op, trace.WithAttributes(attrs...))
}

// endOp ends an operation's span: the sandbox and backend once known, and
// on failure the error's kind (never its text, which may quote a
// sandbox's output).
func endOp(span trace.Span, id, backendID string, err error) {
	if !span.IsRecording() {
		return
	}
	if id != "" {
		span.SetAttributes(telemetry.AttrSandbox.String(id))
	}
	if backendID != "" {
		span.SetAttributes(attrBackend.String(backendID))
	}
	if err != nil {
		k, _ := errkind.Of(err)
		span.SetAttributes(attrErrType.String(k.String()))
		span.SetStatus(codes.Error, k.String())
	}
	span.End()
}

// traceTemplate records a create's template: the sandbox's, else the
// request's, else the base template.
func traceTemplate(span trace.Span, names ...string) {
	if span.IsRecording() {
		span.SetAttributes(attrTemplate.String(cmp.Or(cmp.Or(names...), template.BaseName)))
	}
}

// reasonClass is a kill reason for a span: up to its first colon (the rest
// may quote an error), at most 80 bytes.
func reasonClass(reason string) string {
	r, _, _ := strings.Cut(reason, ":")
	if len(r) > 80 {
		r = r[:80]
	}
	return strings.TrimSpace(r)
}

// kill is killUntraced in a span "sandbox.kill". A kill the manager makes
// on its own (no request's span in ctx) is a root span with its reason as
// trigger; one that finds the sandbox already ending (the watch after a
// requested kill) records nothing.
func (m *Manager) kill(ctx context.Context, id string, reason string) error {
	if !telemetry.Enabled() {
		return m.killUntraced(ctx, id, reason)
	}
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		sb, err := m.st.GetSandbox(ctx, id)
		if err == nil && (State(sb.State).Terminal() || State(sb.State) == StateStopping) {
			return m.killUntraced(ctx, id, reason)
		}
		if _, ok := ctx.Value(triggerKey{}).(string); !ok {
			ctx = auto(ctx, reasonClass(reason))
		}
	}
	iso := m.isolationOf(id) // before the kill forgets the sandbox
	ctx, span := startOp(ctx, "kill", id, attrReason.String(reasonClass(reason)))
	err := m.killUntraced(ctx, id, reason)
	endOp(span, "", iso, err)
	return err
}

// CaptureFS is captureFS in a span "sandbox.snapshot".
func (m *Manager) CaptureFS(ctx context.Context, id string, dir func(target string) (string, error)) (store.Sandbox, error) {
	ctx, span := startOp(ctx, "snapshot", id)
	sb, err := m.captureFS(ctx, id, dir)
	endOp(span, "", sb.Backend, err)
	return sb, err
}
