package warden

import (
	"context"
	"fmt"
	"net/http"
)

// Whoami returns the principal and API key the client authenticates as.
func (c *Client) Whoami(ctx context.Context) (Identity, error) {
	var id Identity
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/whoami", idempotent: true}, &id); err != nil {
		return Identity{}, fmt.Errorf("whoami: %w", err)
	}
	return id, nil
}

// CreatePrincipal creates a user or agent principal. It needs the admin scope.
func (c *Client) CreatePrincipal(ctx context.Context, req CreatePrincipalRequest) (Principal, error) {
	var p Principal
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/principals", json: req}, &p); err != nil {
		return Principal{}, fmt.Errorf("create principal: %w", err)
	}
	return p, nil
}

// ListPrincipals returns every principal. It needs the admin scope.
func (c *Client) ListPrincipals(ctx context.Context) ([]Principal, error) {
	var out struct {
		Principals []Principal `json:"principals"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/principals", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list principals: %w", err)
	}
	return out.Principals, nil
}

// CreateKey creates an API key. The secret, CreatedKey.Key, is returned only here. It
// needs the admin scope.
func (c *Client) CreateKey(ctx context.Context, req CreateKeyRequest) (CreatedKey, error) {
	var k CreatedKey
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/keys", json: req}, &k); err != nil {
		return CreatedKey{}, fmt.Errorf("create key: %w", err)
	}
	return k, nil
}

// ListKeys returns every API key, revoked ones included. It needs the admin scope.
func (c *Client) ListKeys(ctx context.Context) ([]APIKey, error) {
	var out struct {
		Keys []APIKey `json:"keys"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/keys", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out.Keys, nil
}

// RevokeKey revokes the API key with the given ID at once. It needs the admin scope.
func (c *Client) RevokeKey(ctx context.Context, keyID string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/keys/%s", keyID), idempotent: true}, nil); err != nil {
		return fmt.Errorf("revoke key %s: %w", keyID, err)
	}
	return nil
}
