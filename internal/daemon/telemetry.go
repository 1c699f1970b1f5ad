package daemon

import (
	"context"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/llmgw"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// startTracing sets up OpenTelemetry tracing from the config's tracing
// block and the OTEL_* environment (docs/tracing.md); the returned stop
// flushes the spans not yet exported (for up to 5 seconds) and turns
// tracing off. Without a tracing block it does nothing.
func (d *daemon) startTracing(ctx context.Context) (stop func(), err error) {
	p, err := telemetry.Setup(ctx, d.cfg.Tracing, os.Getenv, d.log)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			d.log.Warn("tracing: spans left unexported at shutdown", "err", err)
		}
	}, nil
}

// traceMain is the span middleware of the API listener, which serves the
// native API, the MCP gateway and the LLM gateway: the native API names
// its spans after its routes itself (api.serve).
func traceMain(h http.Handler) http.Handler { return telemetry.Handler(classifyMain, h) }

func classifyMain(r *http.Request) (door, route string) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, llmgw.PathPrefix):
		return "llm", llmgw.PathPrefix + "{provider}/{endpoint...}"
	case strings.HasPrefix(p, mcpgw.PathPrefix):
		return "mcp", mcpgw.PathPrefix + "{server}"
	case p == mcpgw.OAuthCallbackPath, p == mcpgw.TokenPath, p == mcpgw.AuthServerMetadataPath:
		return "mcp", p
	case strings.HasPrefix(p, mcpgw.ResourceMetadataPrefix+mcpgw.PathPrefix):
		return "mcp", mcpgw.ResourceMetadataPrefix + mcpgw.PathPrefix + "{server}"
	}
	return "api", ""
}

// traceE2B is the span middleware of the E2B listener: the control plane
// names its spans after its routes, the proxy marks sandbox traffic (door
// envd) itself (package e2b, telemetry.go).
func traceE2B(h http.Handler) http.Handler {
	return telemetry.Handler(func(*http.Request) (string, string) { return "e2b", "" }, h)
}

// traceLocal is the span middleware of runs' route to wardend from their
// sandbox (agentroute.go): the LLM and MCP gateways and a run's reply.
func traceLocal(h http.Handler) http.Handler {
	return telemetry.Handler(func(r *http.Request) (string, string) {
		door, route := classifyMain(r)
		if door == "api" {
			door = "local"
		}
		return door, route
	}, h)
}

// traceBuiltin is the span middleware of the native API as the MCP
// builtin connector calls it in process: each call gets a server span of
// its own (door builtin) under the tool call's span, which the API then
// names, as it would a call over HTTP.
func traceBuiltin(h http.Handler) http.Handler {
	return telemetry.Handler(func(*http.Request) (string, string) { return "builtin", "" }, h)
}
