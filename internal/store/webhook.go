package store

import (
	"context"
	"time"
)

// WebhookStore keeps the outgoing webhooks' cursors (internal/webhook):
// per endpoint, the seq of the last audit event it handled.
type WebhookStore interface {
	// WebhookCursor returns an endpoint's cursor (ErrNotFound when it has
	// none yet).
	WebhookCursor(ctx context.Context, endpoint string) (WebhookCursor, error)
	// SetWebhookCursor creates or moves an endpoint's cursor.
	SetWebhookCursor(ctx context.Context, c WebhookCursor) error
}

// WebhookCursor is where an endpoint's deliveries stand.
type WebhookCursor struct {
	Endpoint  string
	Seq       int64
	UpdatedAt time.Time
}
