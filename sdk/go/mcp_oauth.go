package warden

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// MCPOAuthStart is the start of a remote connector's OAuth 2.1 flow: the
// URL the user opens in a browser. The authorization server sends the
// browser back to wardend, which keeps the tokens; they never reach the
// caller.
type MCPOAuthStart struct {
	AuthorizeURL string    `json:"authorize_url"`
	RedirectURI  string    `json:"redirect_uri"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// MCPOAuthRequest says whose credential the flow obtains: the caller's
// own (zero value), another principal's, or the connector's shared one
// (the last two need mcp:admin).
type MCPOAuthRequest struct {
	PrincipalID string `json:"principal_id,omitempty"`
	Shared      bool   `json:"shared,omitempty"`
}

// StartMCPOAuth starts the OAuth flow of a remote connector with oauth
// settings.
func (c *Client) StartMCPOAuth(ctx context.Context, connector string, req MCPOAuthRequest) (MCPOAuthStart, error) {
	var out MCPOAuthStart
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/mcp/connectors/%s/oauth", connector), json: req}, &out); err != nil {
		return out, fmt.Errorf("start oauth of mcp connector %s: %w", connector, err)
	}
	return out, nil
}
