package warden

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Secret is a stored secret's metadata; its value never comes back from the daemon.
type Secret struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Owner    string    `json:"owner"`
	Created  time.Time `json:"created"`
	Current  int       `json:"current_version"`
	Revoked  bool      `json:"revoked"`
	Versions []struct {
		Version     int       `json:"version"`
		Created     time.Time `json:"created"`
		Revoked     bool      `json:"revoked"`
		Fingerprint string    `json:"fingerprint"`
	} `json:"versions"`
}

// Grant lets a sandbox (or every sandbox of a principal) use a secret on hosts: inside the
// sandbox only Placeholder exists (in the environment variable EnvName); the daemon's
// egress path swaps it for the secret in the Header of requests to the hosts.
type Grant struct {
	ID          string    `json:"id,omitempty"`
	SecretID    string    `json:"secret_id,omitempty"`
	Sandbox     string    `json:"sandbox,omitempty"`
	Principal   string    `json:"principal,omitempty"`
	Hosts       []string  `json:"hosts"`
	Header      string    `json:"header,omitempty"`
	PathPrefix  string    `json:"path_prefix,omitempty"`
	EnvName     string    `json:"env_name,omitempty"`
	Placeholder string    `json:"placeholder,omitempty"`
	Created     time.Time `json:"created,omitzero"`
	Revoked     bool      `json:"revoked,omitempty"`
	// Middleware, instead of Sandbox or Principal, lets that middleware's script read the
	// secret (secrets.NAME, when its definition lists NAME): admin only. Hosts are then
	// optional and bound where its fetch may send the value; Header, PathPrefix and
	// EnvName do not apply.
	Middleware string `json:"middleware,omitempty"`
	// ManagedBy is "agent:NAME" for a grant a hosted agent's spec secrets keep on its
	// run's sandbox (made and revoked by Warden, not through this API).
	ManagedBy string `json:"managed_by,omitempty"`
	// Format is how the placeholder sits in Header: "" (as is) or "basic", inside the
	// base64 credentials of "Basic ..." (git and other HTTP Basic clients).
	Format string `json:"format,omitempty"`
}

// PutSecret stores a secret, or rotates it (a new version) when one by that name exists.
func (c *Client) PutSecret(ctx context.Context, name, value string) (Secret, error) {
	var s Secret
	err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/secrets", json: map[string]string{"name": name, "value": value}}, &s)
	if err != nil {
		return s, fmt.Errorf("put secret %s: %w", name, err)
	}
	return s, nil
}

// ListSecrets lists the caller's secrets (an admin's: everyone's).
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	var out struct {
		Secrets []Secret `json:"secrets"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/secrets", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out.Secrets, nil
}

// RevokeSecret revokes every version of a secret: the next request stops using it.
func (c *Client) RevokeSecret(ctx context.Context, id string) error {
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/secrets/%s/revoke", id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("revoke secret %s: %w", id, err)
	}
	return nil
}

// DeleteSecret deletes a secret and its grants.
func (c *Client) DeleteSecret(ctx context.Context, id string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/secrets/%s", id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	return nil
}

// CreateGrant grants a secret to a sandbox or a principal for hosts.
func (c *Client) CreateGrant(ctx context.Context, secretID string, g Grant) (Grant, error) {
	var out Grant
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/secrets/%s/grants", secretID), json: g}, &out); err != nil {
		return out, fmt.Errorf("grant secret %s: %w", secretID, err)
	}
	return out, nil
}

// ListGrants lists a secret's grants.
func (c *Client) ListGrants(ctx context.Context, secretID string) ([]Grant, error) {
	var out struct {
		Grants []Grant `json:"grants"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/secrets/%s/grants", secretID), idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list grants of %s: %w", secretID, err)
	}
	return out.Grants, nil
}

// RevokeGrant revokes a grant; the next request no longer gets the secret.
func (c *Client) RevokeGrant(ctx context.Context, id string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/grants/%s", id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("revoke grant %s: %w", id, err)
	}
	return nil
}
