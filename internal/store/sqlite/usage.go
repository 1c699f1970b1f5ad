package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.UsageStore = (*Store)(nil)

// AddLLMUsage implements store.UsageStore.
func (s *Store) AddLLMUsage(ctx context.Context, u store.LLMUsage) error {
	if u.PrincipalID == "" || len(u.Day) != len("2006-01-02") || u.Model == "" {
		return fmt.Errorf("add llm usage: principal, day and model are required: %w", store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO llm_usage (principal_id, agent, day, provider, model, sandbox_id, calls, tokens_in, tokens_out, cost_micros)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (principal_id, agent, day, provider, model, sandbox_id) DO UPDATE SET
				calls = calls + excluded.calls, tokens_in = tokens_in + excluded.tokens_in,
				tokens_out = tokens_out + excluded.tokens_out, cost_micros = cost_micros + excluded.cost_micros`,
			u.PrincipalID, u.Agent, u.Day, u.Provider, u.Model, u.SandboxID, u.Calls, u.TokensIn, u.TokensOut, u.CostMicros)
		return err
	})
	if err != nil {
		return fmt.Errorf("add llm usage: %w", err)
	}
	return nil
}

func llmUsageWhere(f store.LLMUsageFilter) (string, []any) {
	var conds []string
	var args []any
	if len(f.Principals) > 0 {
		conds = append(conds, "principal_id IN (?"+strings.Repeat(", ?", len(f.Principals)-1)+")")
		for _, p := range f.Principals {
			args = append(args, p)
		}
	}
	if f.Agent != "" {
		conds = append(conds, "agent = ?")
		args = append(args, f.Agent)
	}
	if f.Sandbox != "" {
		conds = append(conds, "sandbox_id = ?")
		args = append(args, f.Sandbox)
	}
	if f.FromDay != "" {
		conds = append(conds, "day >= ?")
		args = append(args, f.FromDay)
	}
	if f.ToDay != "" {
		conds = append(conds, "day <= ?")
		args = append(args, f.ToDay)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// SumLLMUsage implements store.UsageStore.
func (s *Store) SumLLMUsage(ctx context.Context, f store.LLMUsageFilter) (int64, int64, error) {
	where, args := llmUsageWhere(f)
	var tokens, cost int64
	err := s.reader.QueryRowContext(ctx, `SELECT COALESCE(SUM(tokens_in + tokens_out), 0), COALESCE(SUM(cost_micros), 0) FROM llm_usage`+where, args...).Scan(&tokens, &cost)
	if err != nil {
		return 0, 0, fmt.Errorf("sum llm usage: %w", err)
	}
	return tokens, cost, nil
}

// ListLLMUsage implements store.UsageStore.
func (s *Store) ListLLMUsage(ctx context.Context, f store.LLMUsageFilter) ([]store.LLMUsage, error) {
	where, args := llmUsageWhere(f)
	rows, err := s.reader.QueryContext(ctx, `SELECT principal_id, agent, day, provider, model, sandbox_id, calls, tokens_in, tokens_out, cost_micros
		FROM llm_usage`+where+` ORDER BY day, principal_id, agent, provider, model, sandbox_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list llm usage: %w", err)
	}
	defer rows.Close()
	var out []store.LLMUsage
	for rows.Next() {
		var u store.LLMUsage
		if err := rows.Scan(&u.PrincipalID, &u.Agent, &u.Day, &u.Provider, &u.Model, &u.SandboxID, &u.Calls, &u.TokensIn, &u.TokensOut, &u.CostMicros); err != nil {
			return nil, fmt.Errorf("list llm usage: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list llm usage: %w", err)
	}
	return out, nil
}

// GetUsageSetting implements store.UsageStore.
func (s *Store) GetUsageSetting(ctx context.Context, name string) (store.UsageSetting, error) {
	var v string
	var at sql.NullInt64
	st := store.UsageSetting{Name: name}
	err := s.reader.QueryRowContext(ctx, `SELECT value, updated_at, updated_by FROM usage_settings WHERE name = ?`, name).Scan(&v, &at, &st.UpdatedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return store.UsageSetting{}, fmt.Errorf("usage setting %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.UsageSetting{}, fmt.Errorf("usage setting %s: %w", name, err)
	}
	st.Value, st.UpdatedAt = json.RawMessage(v), fromNanos(at)
	return st, nil
}

// PutUsageSetting implements store.UsageStore.
func (s *Store) PutUsageSetting(ctx context.Context, st store.UsageSetting) error {
	if st.Name == "" || !json.Valid(st.Value) || st.UpdatedAt.IsZero() {
		return fmt.Errorf("put usage setting %q: name, JSON value and time are required: %w", st.Name, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO usage_settings (name, value, updated_at, updated_by) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
			st.Name, string(st.Value), nanos(st.UpdatedAt), st.UpdatedBy)
		return err
	})
	if err != nil {
		return fmt.Errorf("put usage setting %s: %w", st.Name, err)
	}
	return nil
}

// DeleteUsageSetting implements store.UsageStore.
func (s *Store) DeleteUsageSetting(ctx context.Context, name string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM usage_settings WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete usage setting %s: %w", name, err)
	}
	return nil
}

// AddAuditCheckpoint implements store.UsageStore.
func (s *Store) AddAuditCheckpoint(ctx context.Context, c store.AuditCheckpoint) error {
	if c.N < 1 || c.Size < 0 || c.Root == "" || c.Note == "" || c.CreatedAt.IsZero() {
		return fmt.Errorf("add audit checkpoint %d: %w", c.N, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(n), 0) FROM audit_checkpoints`).Scan(&last); err != nil {
			return err
		}
		if c.N != last+1 {
			return fmt.Errorf("the last checkpoint is %d: %w", last, store.ErrConflict)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO audit_checkpoints (n, size, root, note, created_at) VALUES (?, ?, ?, ?, ?)`,
			c.N, c.Size, c.Root, c.Note, nanos(c.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("add audit checkpoint %d: %w", c.N, err)
	}
	return nil
}

// ListAuditCheckpoints implements store.UsageStore.
func (s *Store) ListAuditCheckpoints(ctx context.Context) ([]store.AuditCheckpoint, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT n, size, root, note, created_at FROM audit_checkpoints ORDER BY n`)
	if err != nil {
		return nil, fmt.Errorf("list audit checkpoints: %w", err)
	}
	defer rows.Close()
	var out []store.AuditCheckpoint
	for rows.Next() {
		var c store.AuditCheckpoint
		var at sql.NullInt64
		if err := rows.Scan(&c.N, &c.Size, &c.Root, &c.Note, &at); err != nil {
			return nil, fmt.Errorf("list audit checkpoints: %w", err)
		}
		c.CreatedAt = fromNanos(at)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit checkpoints: %w", err)
	}
	return out, nil
}
