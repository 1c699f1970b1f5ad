package api

import (
	"net/http"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// traceSandbox records on the request's span (docs/tracing.md) the sandbox
// the call acted on: the one sandboxFor resolved, or the one a create made.
func traceSandbox(r *http.Request, rt route, st *reqState) {
	if !telemetry.Enabled() {
		return
	}
	switch {
	case st.sb != nil:
		telemetry.SetSandbox(r.Context(), st.sb.ID)
	case rt.kind == govern.KindSandboxCreate && st.target != "":
		telemetry.SetSandbox(r.Context(), st.target)
	}
}
