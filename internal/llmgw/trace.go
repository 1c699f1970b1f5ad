package llmgw

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// Tracing of LLM calls (docs/tracing.md): each call the gateway handles is
// a client span "{operation} {model}" under the request's span, with
// OpenTelemetry's GenAI attribute names where they exist: the provider,
// the model, whether it streamed, the tokens in and out, the cost and the
// outcome. Prompts and responses are never recorded.
const (
	attrGenAISystem   = attribute.Key("gen_ai.system")
	attrGenAIProvider = attribute.Key("gen_ai.provider.name")
	attrGenAIOp       = attribute.Key("gen_ai.operation.name")
	attrGenAIModel    = attribute.Key("gen_ai.request.model")
	attrGenAITokensIn = attribute.Key("gen_ai.usage.input_tokens")
	attrGenAITokensOu = attribute.Key("gen_ai.usage.output_tokens")
	attrProvider      = attribute.Key("warden.llm.provider")
	attrAPI           = attribute.Key("warden.llm.api")
	attrRequested     = attribute.Key("warden.llm.requested_model")
	attrStream        = attribute.Key("warden.llm.stream")
	attrCost          = attribute.Key("warden.llm.cost_micros")
	attrOutcome       = attribute.Key("warden.llm.outcome")
	attrAgent         = attribute.Key("warden.agent")
	attrStatus        = attribute.Key("http.response.status_code")
	attrErrType       = attribute.Key("error.type")
)

// operation is the GenAI operation name of a gateway API.
func operation(api string) string {
	switch api {
	case "chat", "messages", "responses":
		return "chat"
	}
	return api // embeddings
}

// startLLMCall starts the call's span and returns r with it in its
// context (the decision, the upstream request and its traceparent hang
// off it). While tracing is off it returns r and a no-op span.
func startLLMCall(r *http.Request, c *call) (*http.Request, trace.Span) {
	if !telemetry.Enabled() {
		_, span := telemetry.Start(r.Context(), "")
		return r, span
	}
	a := c.action.LLM
	attrs := []attribute.KeyValue{attrGenAISystem.String(c.prov.Kind), attrGenAIProvider.String(c.prov.Kind),
		attrGenAIOp.String(operation(c.api)), attrGenAIModel.String(c.model), attrProvider.String(c.prov.Name),
		attrAPI.String(c.api), attrRequested.String(a.Model), attrStream.Bool(a.Stream)}
	if c.agent != "" {
		attrs = append(attrs, attrAgent.String(c.agent))
	}
	ctx, span := telemetry.Start(r.Context(), operation(c.api)+" "+c.model,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// traceUpstream sends the call's traceparent to the provider.
func traceUpstream(req *http.Request) { telemetry.Inject(req.Context(), req.Header) }

// endLLMCall ends the call's span once the call is settled or refused:
// tokens and cost (when the provider reported usage), the upstream status
// and the outcome.
func endLLMCall(span trace.Span, c *call) {
	if !span.IsRecording() {
		return
	}
	var attrs []attribute.KeyValue
	for _, kv := range []struct {
		k attribute.Key
		v any
	}{{attrGenAITokensIn, c.detail["tokens_in"]}, {attrGenAITokensOu, c.detail["tokens_out"]},
		{attrCost, c.detail["cost_micros"]}, {attrStatus, c.detail["status"]}} {
		switch n := kv.v.(type) {
		case int64:
			attrs = append(attrs, kv.k.Int64(n))
		case int:
			attrs = append(attrs, kv.k.Int(n))
		}
	}
	if sb, ok := c.detail["sandbox"].(string); ok && sb != "" {
		attrs = append(attrs, telemetry.AttrSandbox.String(sb))
	}
	attrs = append(attrs, attrOutcome.String(c.outcome))
	span.SetAttributes(attrs...)
	switch c.outcome {
	case govern.AuditError:
		span.SetAttributes(attrErrType.String("call_failed"))
		span.SetStatus(codes.Error, "the call failed")
	case govern.AuditDenied:
		span.SetAttributes(attrErrType.String("refused"))
		span.SetStatus(codes.Error, "the call was refused")
	}
	span.End()
}
