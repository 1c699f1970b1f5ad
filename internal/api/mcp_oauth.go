package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/store"
)

// MCPOAuth is what the MCP hooks (Config.MCP) offer when the gateway runs
// OAuth 2.1 for remote connectors (internal/mcpgw's oauth.go): starting
// the authorization-code flow for a principal's own credential, or the
// shared one (principal ""), owned by owner.
type MCPOAuth interface {
	StartOAuth(ctx context.Context, connector, principal, owner string) (mcpgw.OAuthStart, error)
}

// mcpOAuthBody is POST /v1/mcp/connectors/{id}/oauth's body.
type mcpOAuthBody struct {
	// PrincipalID authorizes for another principal (mcp:admin); Shared
	// makes the tokens the connector's shared credential (mcp:admin).
	PrincipalID string `json:"principal_id"`
	Shared      bool   `json:"shared"`
}

// startMCPOAuth starts the OAuth flow of a remote connector: the answer
// is the URL the user opens; the authorization server sends the browser
// back to wardend, which keeps the tokens. The tokens never appear in an
// API answer.
func (s *Server) startMCPOAuth(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var q mcpOAuthBody
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	st := stateOf(r)
	pid, err := s.credentialFor(r, q.PrincipalID, q.Shared)
	if err != nil {
		return err
	}
	st.target = id
	st.detail["principal_id"] = pid
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "oauth_start", Object: "credential", ID: id,
		Connector: id, PrincipalID: pid}}); err != nil {
		return err
	}
	oa, ok := s.cfg.MCP.(MCPOAuth)
	if !ok {
		return apierr.Unavailable("the MCP gateway does not run OAuth on this daemon", nil)
	}
	start, err := oa.StartOAuth(r.Context(), id, pid, st.principal)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return mcpConnectorErr(id, err)
	case errors.Is(err, mcpgw.ErrOAuthInvalid):
		return apierr.Validation("%s", err.Error())
	case errors.Is(err, mcpgw.ErrOAuthUpstream):
		return apierr.Wrap(apierr.CodeBadGateway, err.Error(), err)
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, start)
}
