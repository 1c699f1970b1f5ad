package store

import (
	"context"
	"time"
)

// WebhookEndpointStore keeps the outgoing webhook endpoints made through
// the API (internal/webhook gives them their meaning; those of the config
// file are not stored). The sqlite store implements it.
type WebhookEndpointStore interface {
	// CreateWebhookEndpoint inserts an endpoint; its name must be unique
	// (ErrConflict otherwise).
	CreateWebhookEndpoint(ctx context.Context, e WebhookEndpoint) error
	// GetWebhookEndpoint returns an endpoint or ErrNotFound.
	GetWebhookEndpoint(ctx context.Context, name string) (WebhookEndpoint, error)
	// ListWebhookEndpoints returns every endpoint ordered by name.
	ListWebhookEndpoints(ctx context.Context) ([]WebhookEndpoint, error)
	// UpdateWebhookEndpoint is a read-modify-write in one transaction; fn
	// must not change the name (ErrInvalid).
	UpdateWebhookEndpoint(ctx context.Context, name string, fn func(*WebhookEndpoint) error) (WebhookEndpoint, error)
	// DeleteWebhookEndpoint removes an endpoint with its cursor and
	// delivery state (ErrNotFound if there is none), so that an endpoint
	// made later under the name starts afresh.
	DeleteWebhookEndpoint(ctx context.Context, name string) error
}

// WebhookEndpoint is an outgoing webhook endpoint made through the API.
type WebhookEndpoint struct {
	Name        string
	URL         string
	SecretID    string   // the secret holding the signing key
	Events      []string // event type globs
	Outcomes    []string // success, denied, error; empty: all
	MaxAttempts int
	Enabled     bool
	CreatedBy   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}
