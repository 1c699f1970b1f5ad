package warden

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// ScopeWebhooksAdmin manages the outgoing webhooks; never held by an agent principal.
const ScopeWebhooksAdmin = "webhooks:admin"

// Webhook is an outgoing webhook endpoint: a receiver of the audit events it names,
// signed in the Standard Webhooks format, with its delivery state.
type Webhook struct {
	Name        string          `json:"name"`
	Source      string          `json:"source"` // "config" (the config file's, read-only) or "api"
	URL         string          `json:"url"`
	Secret      string          `json:"secret"` // ID of the signing key's secret
	Events      []string        `json:"events"`
	Outcomes    []string        `json:"outcomes"`
	MaxAttempts int             `json:"max_attempts"`
	Enabled     bool            `json:"enabled"`
	CreatedBy   string          `json:"created_by,omitempty"`
	CreatedAt   *time.Time      `json:"created_at,omitempty"`
	UpdatedAt   *time.Time      `json:"updated_at,omitempty"`
	Delivery    WebhookDelivery `json:"delivery"`
}

// WebhookDelivery is where an endpoint's deliveries stand.
type WebhookDelivery struct {
	Running         bool       `json:"running"`
	Cursor          int64      `json:"cursor"`   // seq of the last audit event handled
	Attempts        int        `json:"attempts"` // tries so far of the event in hand
	Delivered       int64      `json:"delivered"`
	GivenUp         int64      `json:"given_up"`
	LastAttemptAt   *time.Time `json:"last_attempt_at,omitempty"`
	LastStatus      int        `json:"last_status,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	LastDeliveredAt *time.Time `json:"last_delivered_at,omitempty"`
}

// WebhookWrite defines an endpoint (CreateWebhook, UpdateWebhook).
type WebhookWrite struct {
	Name        string   `json:"name,omitempty"`
	URL         string   `json:"url"`
	Secret      string   `json:"secret"` // ID of a secret holding the signing key
	Events      []string `json:"events"`
	Outcomes    []string `json:"outcomes,omitempty"`
	MaxAttempts int      `json:"max_attempts,omitempty"` // 0: 12
	Enabled     *bool    `json:"enabled,omitempty"`      // nil: true
}

// WebhookTestResult is what a test ping got from the receiver.
type WebhookTestResult struct {
	MessageID  string `json:"message_id"`
	OK         bool   `json:"ok"`
	StatusCode int    `json:"status_code,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// ListWebhooks lists the endpoints (the config file's first) with their delivery state.
func (c *Client) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	var out struct {
		Webhooks []Webhook `json:"webhooks"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/webhooks", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return out.Webhooks, nil
}

// GetWebhook returns one endpoint with its delivery state.
func (c *Client) GetWebhook(ctx context.Context, name string) (Webhook, error) {
	var w Webhook
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/webhooks/%s", name), idempotent: true}, &w); err != nil {
		return w, fmt.Errorf("get webhook %s: %w", name, err)
	}
	return w, nil
}

// CreateWebhook adds an endpoint; it gets the events written from now on.
func (c *Client) CreateWebhook(ctx context.Context, def WebhookWrite) (Webhook, error) {
	var w Webhook
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/webhooks", json: def}, &w); err != nil {
		return w, fmt.Errorf("create webhook %s: %w", def.Name, err)
	}
	return w, nil
}

// UpdateWebhook replaces an API-made endpoint's definition; it keeps its place in the log.
func (c *Client) UpdateWebhook(ctx context.Context, name string, def WebhookWrite) (Webhook, error) {
	var w Webhook
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/webhooks/%s", name), json: def}, &w); err != nil {
		return w, fmt.Errorf("update webhook %s: %w", name, err)
	}
	return w, nil
}

// DeleteWebhook stops and removes an API-made endpoint.
func (c *Client) DeleteWebhook(ctx context.Context, name string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/webhooks/%s", name)}, nil); err != nil {
		return fmt.Errorf("delete webhook %s: %w", name, err)
	}
	return nil
}

// TestWebhook sends a signed webhook.test ping to the endpoint now and reports what the
// receiver answered (a refusal is OK false, not an error).
func (c *Client) TestWebhook(ctx context.Context, name string) (WebhookTestResult, error) {
	var res WebhookTestResult
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/webhooks/%s/test", name)}, &res); err != nil {
		return res, fmt.Errorf("test webhook %s: %w", name, err)
	}
	return res, nil
}
