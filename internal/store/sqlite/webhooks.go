package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.WebhookEndpointStore = (*Store)(nil)

const webhookEndpointColumns = `name, url, secret_id, events, outcomes, max_attempts, enabled, created_by, created_at, updated_at`

func validWebhookEndpoint(e store.WebhookEndpoint) error {
	switch {
	case e.Name == "":
		return fmt.Errorf("empty name: %w", store.ErrInvalid)
	case e.URL == "" || e.SecretID == "":
		return fmt.Errorf("url and secret are required: %w", store.ErrInvalid)
	case len(e.Events) == 0:
		return fmt.Errorf("no events: %w", store.ErrInvalid)
	case e.MaxAttempts < 0:
		return fmt.Errorf("negative max_attempts: %w", store.ErrInvalid)
	case e.CreatedAt.IsZero() || e.UpdatedAt.IsZero():
		return fmt.Errorf("created_at and updated_at are required: %w", store.ErrInvalid)
	}
	return nil
}

func webhookEndpointArgs(e store.WebhookEndpoint) ([]any, error) {
	ev, err := json.Marshal(e.Events)
	if err != nil {
		return nil, err
	}
	outcomes := e.Outcomes
	if outcomes == nil {
		outcomes = []string{}
	}
	oc, err := json.Marshal(outcomes)
	if err != nil {
		return nil, err
	}
	return []any{e.Name, e.URL, e.SecretID, string(ev), string(oc), e.MaxAttempts, e.Enabled, e.CreatedBy,
		nanos(e.CreatedAt), nanos(e.UpdatedAt)}, nil
}

// CreateWebhookEndpoint implements store.WebhookEndpointStore.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, e store.WebhookEndpoint) error {
	if err := validWebhookEndpoint(e); err != nil {
		return fmt.Errorf("create webhook endpoint %s: %w", e.Name, err)
	}
	args, err := webhookEndpointArgs(e)
	if err != nil {
		return fmt.Errorf("create webhook endpoint %s: %w", e.Name, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO webhook_endpoints (`+webhookEndpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
		if isUnique(err) {
			return fmt.Errorf("name in use: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create webhook endpoint %s: %w", e.Name, err)
	}
	return nil
}

// GetWebhookEndpoint implements store.WebhookEndpointStore.
func (s *Store) GetWebhookEndpoint(ctx context.Context, name string) (store.WebhookEndpoint, error) {
	e, err := scanWebhookEndpoint(s.reader.QueryRowContext(ctx, `SELECT `+webhookEndpointColumns+` FROM webhook_endpoints WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.WebhookEndpoint{}, fmt.Errorf("webhook endpoint %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.WebhookEndpoint{}, fmt.Errorf("get webhook endpoint %s: %w", name, err)
	}
	return e, nil
}

// ListWebhookEndpoints implements store.WebhookEndpointStore.
func (s *Store) ListWebhookEndpoints(ctx context.Context) ([]store.WebhookEndpoint, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+webhookEndpointColumns+` FROM webhook_endpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	out, err := collect(rows, scanWebhookEndpoint)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	return out, nil
}

// UpdateWebhookEndpoint implements store.WebhookEndpointStore.
func (s *Store) UpdateWebhookEndpoint(ctx context.Context, name string, fn func(*store.WebhookEndpoint) error) (store.WebhookEndpoint, error) {
	var out store.WebhookEndpoint
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		e, err := scanWebhookEndpoint(tx.QueryRowContext(ctx, `SELECT `+webhookEndpointColumns+` FROM webhook_endpoints WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
		if e.Name != name {
			return fmt.Errorf("name changed: %w", store.ErrInvalid)
		}
		if err := validWebhookEndpoint(e); err != nil {
			return err
		}
		args, err := webhookEndpointArgs(e)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_endpoints SET url = ?, secret_id = ?, events = ?, outcomes = ?,
			max_attempts = ?, enabled = ?, created_by = ?, created_at = ?, updated_at = ? WHERE name = ?`,
			append(args[1:], name)...); err != nil {
			return err
		}
		out = e
		return nil
	})
	if err != nil {
		return store.WebhookEndpoint{}, fmt.Errorf("update webhook endpoint %s: %w", name, err)
	}
	return out, nil
}

// DeleteWebhookEndpoint implements store.WebhookEndpointStore.
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, name string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_endpoints WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM webhook_cursors WHERE endpoint = ?`, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete webhook endpoint %s: %w", name, err)
	}
	return nil
}

func scanWebhookEndpoint(r scanner) (store.WebhookEndpoint, error) {
	var e store.WebhookEndpoint
	var events, outcomes string
	var created, updated sql.NullInt64
	if err := r.Scan(&e.Name, &e.URL, &e.SecretID, &events, &outcomes, &e.MaxAttempts, &e.Enabled, &e.CreatedBy,
		&created, &updated); err != nil {
		return e, err
	}
	if err := json.Unmarshal([]byte(events), &e.Events); err != nil {
		return e, fmt.Errorf("webhook endpoint %s: events: %w", e.Name, err)
	}
	if err := json.Unmarshal([]byte(outcomes), &e.Outcomes); err != nil {
		return e, fmt.Errorf("webhook endpoint %s: outcomes: %w", e.Name, err)
	}
	if len(e.Outcomes) == 0 {
		e.Outcomes = nil
	}
	e.CreatedAt, e.UpdatedAt = fromNanos(created), fromNanos(updated)
	return e, nil
}
