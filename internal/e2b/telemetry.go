package e2b

import (
	"net/http"
	"strings"

	"github.com/warden-sandbox/warden/internal/telemetry"
)

// Tracing (docs/tracing.md): the daemon wraps the E2B listener in
// telemetry.Handler; these name the request's span after its route and
// record the sandbox, for the control plane and for sandbox traffic (the
// envd proxy).

// traceRoute names the control plane request's span after pattern.
func traceRoute(pattern string, h http.Handler) http.Handler {
	if !telemetry.Enabled() {
		return h
	}
	sandboxRoute := strings.Contains(pattern, "/sandboxes/{id}")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		telemetry.Route(r.Context(), r.Method, pattern)
		if sandboxRoute {
			telemetry.SetSandbox(r.Context(), r.PathValue("id"))
		}
		h.ServeHTTP(w, r)
	})
}

// traceProxy marks the request's span as sandbox traffic (door envd, or
// port for a sandbox's own port) to sandbox id, named after the route
// envd or the code interpreter serves (never the raw path: context ids
// become {id}).
func traceProxy(r *http.Request, id string, port int) {
	if !telemetry.Enabled() {
		return
	}
	ctx := r.Context()
	telemetry.SetSandbox(ctx, id)
	path := r.URL.Path
	switch {
	case port == PortEnvd:
		telemetry.SetDoor(ctx, "envd")
		if envdRoute(path) || internalRoutes[path] {
			telemetry.Route(ctx, r.Method, path)
		}
	case port == PortCode:
		telemetry.SetDoor(ctx, "envd")
		if codeRoute(path) {
			if rest, ok := strings.CutPrefix(path, "/contexts/"); ok {
				path = "/contexts/{id}"
				if _, action, has := strings.Cut(rest, "/"); has {
					path += "/" + action
				}
			}
			telemetry.Route(ctx, r.Method, path)
		}
	default:
		telemetry.SetDoor(ctx, "port")
		telemetry.Route(ctx, r.Method, "/{port-proxy}")
	}
}
