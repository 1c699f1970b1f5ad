package mcpgw

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// Tracing of tool calls (docs/tracing.md): each call that goes upstream is
// a client span "tools/call {tool}" under the request's span, named and
// described after OpenTelemetry's MCP and GenAI conventions where they
// have a name. It carries the tool, connector, virtual server and outcome,
// never the arguments or the result.
const (
	attrMCPMethod  = attribute.Key("mcp.method.name")
	attrToolName   = attribute.Key("gen_ai.tool.name")
	attrOperation  = attribute.Key("gen_ai.operation.name")
	attrServer     = attribute.Key("warden.mcp.server")
	attrConnector  = attribute.Key("warden.mcp.connector")
	attrConnKind   = attribute.Key("warden.mcp.connector_kind")
	attrToolExpose = attribute.Key("warden.mcp.tool")
	attrOutcome    = attribute.Key("warden.mcp.outcome")
	attrErrType    = attribute.Key("error.type")
)

// startToolCall starts the span of a call to t upstream; a no-op span
// while tracing is off.
func startToolCall(ctx context.Context, server string, t *exposedTool) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return telemetry.Start(ctx, "tools/call "+t.upstream, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrMCPMethod.String("tools/call"), attrOperation.String("execute_tool"),
			attrToolName.String(t.upstream), attrToolExpose.String(t.name), attrServer.String(server),
			attrConnector.String(t.connector), attrConnKind.String(t.kind)))
}

// endToolCall ends a tool call's span with its outcome: success, a tool
// error (the result says isError) or error (no result).
func endToolCall(span trace.Span, res *mcp.CallToolResult, err error) {
	if !span.IsRecording() {
		return
	}
	switch {
	case err != nil:
		span.SetAttributes(attrOutcome.String("error"), attrErrType.String("upstream_error"))
		span.SetStatus(codes.Error, "the upstream call failed")
	case res != nil && res.IsError:
		span.SetAttributes(attrOutcome.String("tool_error"), attrErrType.String("tool_error"))
		span.SetStatus(codes.Error, "the tool returned an error")
	default:
		span.SetAttributes(attrOutcome.String("success"))
	}
	span.End()
}

// traceMeta adds the call's traceparent (and tracestate) to an upstream
// request's _meta, where MCP servers look for it; nothing while tracing is
// off.
func traceMeta(ctx context.Context, meta *mcp.Meta) {
	if !telemetry.Enabled() {
		return
	}
	tc := map[string]any{}
	telemetry.InjectMap(ctx, tc)
	if len(tc) == 0 {
		return
	}
	if *meta == nil {
		*meta = mcp.Meta{}
	}
	maps.Copy(*meta, tc)
}
