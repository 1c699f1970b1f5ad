package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.WebhookStore = (*Store)(nil)

// WebhookCursor implements store.WebhookStore.
func (s *Store) WebhookCursor(ctx context.Context, endpoint string) (store.WebhookCursor, error) {
	c := store.WebhookCursor{Endpoint: endpoint}
	var at, attempt, delivered sql.NullInt64
	err := s.reader.QueryRowContext(ctx, `SELECT seq, updated_at, last_attempt_at, last_status, last_error, attempts,
		delivered, given_up, last_delivered_at FROM webhook_cursors WHERE endpoint = ?`, endpoint).Scan(&c.Seq, &at,
		&attempt, &c.LastStatus, &c.LastError, &c.Attempts, &c.Delivered, &c.GivenUp, &delivered)
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("webhook cursor %s: %w", endpoint, store.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("webhook cursor %s: %w", endpoint, err)
	}
	c.UpdatedAt, c.LastAttemptAt, c.LastDeliveredAt = fromNanos(at), fromNanos(attempt), fromNanos(delivered)
	return c, nil
}

// SetWebhookCursor implements store.WebhookStore.
func (s *Store) SetWebhookCursor(ctx context.Context, c store.WebhookCursor) error {
	if c.Endpoint == "" || c.Seq < 0 || c.UpdatedAt.IsZero() {
		return fmt.Errorf("set webhook cursor: endpoint, seq and updated_at are required: %w", store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO webhook_cursors (endpoint, seq, updated_at, last_attempt_at, last_status,
			last_error, attempts, delivered, given_up, last_delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (endpoint) DO UPDATE SET seq = excluded.seq, updated_at = excluded.updated_at,
			last_attempt_at = excluded.last_attempt_at, last_status = excluded.last_status, last_error = excluded.last_error,
			attempts = excluded.attempts, delivered = excluded.delivered, given_up = excluded.given_up,
			last_delivered_at = excluded.last_delivered_at`,
			c.Endpoint, c.Seq, nanos(c.UpdatedAt), nanos(c.LastAttemptAt), c.LastStatus, c.LastError, c.Attempts,
			c.Delivered, c.GivenUp, nanos(c.LastDeliveredAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("set webhook cursor %s: %w", c.Endpoint, err)
	}
	return nil
}
