package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.AgentCronStore = (*Store)(nil)

// ListAgentCron implements store.AgentCronStore.
func (s *Store) ListAgentCron(ctx context.Context, agentID string) ([]store.AgentCron, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT agent_id, idx, schedule, next_at FROM agent_cron WHERE agent_id = ? ORDER BY idx`, agentID)
	if err != nil {
		return nil, fmt.Errorf("list agent cron %s: %w", agentID, err)
	}
	defer rows.Close()
	var out []store.AgentCron
	for rows.Next() {
		var c store.AgentCron
		var next sql.NullInt64
		if err := rows.Scan(&c.AgentID, &c.Index, &c.Schedule, &next); err != nil {
			return nil, fmt.Errorf("list agent cron %s: %w", agentID, err)
		}
		c.NextAt = fromNanos(next)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent cron %s: %w", agentID, err)
	}
	return out, nil
}

// PutAgentCron implements store.AgentCronStore.
func (s *Store) PutAgentCron(ctx context.Context, c store.AgentCron) error {
	if c.AgentID == "" || c.Index < 0 || c.NextAt.IsZero() {
		return fmt.Errorf("put agent cron: agent, index and next time are required: %w", store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM agents WHERE id = ?`, c.AgentID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("agent %s: %w", c.AgentID, store.ErrNotFound)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO agent_cron (agent_id, idx, schedule, next_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (agent_id, idx) DO UPDATE SET schedule = excluded.schedule, next_at = excluded.next_at`,
			c.AgentID, c.Index, c.Schedule, nanos(c.NextAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("put agent cron %s/%d: %w", c.AgentID, c.Index, err)
	}
	return nil
}
