package store

import (
	"context"
	"time"
)

// WebhookStore keeps the outgoing webhooks' cursors (internal/webhook):
// per endpoint, the seq of the last audit event it handled, with its
// delivery state.
type WebhookStore interface {
	// WebhookCursor returns an endpoint's cursor (ErrNotFound when it has
	// none yet).
	WebhookCursor(ctx context.Context, endpoint string) (WebhookCursor, error)
	// SetWebhookCursor creates or replaces an endpoint's cursor and
	// delivery state (one row: the deliverer writes both at once).
	SetWebhookCursor(ctx context.Context, c WebhookCursor) error
}

// WebhookCursor is where an endpoint's deliveries stand.
type WebhookCursor struct {
	Endpoint  string
	Seq       int64 // the last audit event handled
	UpdatedAt time.Time

	// The delivery state (zero until the first attempt).
	LastAttemptAt   time.Time
	LastStatus      int    // the receiver's HTTP status of the last attempt; 0: no answer
	LastError       string // why the last attempt failed ("" when it succeeded)
	Attempts        int    // tries so far of the event in hand (0 when none is pending)
	Delivered       int64  // events acknowledged
	GivenUp         int64  // events given up on
	LastDeliveredAt time.Time
}
