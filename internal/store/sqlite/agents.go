package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.AgentStore = (*Store)(nil)

const agentColumns = `id, name, principal_id, owner_id, version, spec, webhook_secret, sandbox_id, created_at, updated_at`

const agentRunColumns = `id, agent_id, version, trigger, input, state, reason, sandbox_id, key_id, exit_code, created_by, created_at, started_at, ended_at,
	llm_calls, tokens_in, tokens_out, cost_micros`

type agentRowScanner interface{ Scan(dest ...any) error }

func scanAgent(r agentRowScanner) (store.Agent, error) {
	var a store.Agent
	var spec string
	var created, updated sql.NullInt64
	if err := r.Scan(&a.ID, &a.Name, &a.PrincipalID, &a.OwnerID, &a.Version, &spec, &a.WebhookSecret, &a.SandboxID, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return store.Agent{}, store.ErrNotFound
		}
		return store.Agent{}, err
	}
	a.Spec = json.RawMessage(spec)
	a.CreatedAt, a.UpdatedAt = fromNanos(created), fromNanos(updated)
	return a, nil
}

func scanAgentRun(r agentRowScanner) (store.AgentRun, error) {
	var x store.AgentRun
	var input string
	var exit sql.NullInt64
	var created, started, ended sql.NullInt64
	if err := r.Scan(&x.ID, &x.AgentID, &x.Version, &x.Trigger, &input, &x.State, &x.Reason, &x.SandboxID, &x.KeyID, &exit,
		&x.CreatedBy, &created, &started, &ended, &x.LLMCalls, &x.TokensIn, &x.TokensOut, &x.CostMicros); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return store.AgentRun{}, store.ErrNotFound
		}
		return store.AgentRun{}, err
	}
	x.Input = json.RawMessage(input)
	if exit.Valid {
		c := int(exit.Int64)
		x.ExitCode = &c
	}
	x.CreatedAt, x.StartedAt, x.EndedAt = fromNanos(created), fromNanos(started), fromNanos(ended)
	return x, nil
}

// CreateAgent implements store.AgentStore.
func (s *Store) CreateAgent(ctx context.Context, a store.Agent) error {
	switch {
	case a.ID == "" || a.Name == "" || a.PrincipalID == "":
		return fmt.Errorf("create agent: id, name and principal are required: %w", store.ErrInvalid)
	case a.Version != 1:
		return fmt.Errorf("create agent %s: version %d, want 1: %w", a.Name, a.Version, store.ErrInvalid)
	case len(a.Spec) == 0 || !json.Valid(a.Spec):
		return fmt.Errorf("create agent %s: spec is not JSON: %w", a.Name, store.ErrInvalid)
	case a.CreatedAt.IsZero():
		return fmt.Errorf("create agent %s: created_at is required: %w", a.Name, store.ErrInvalid)
	}
	if a.UpdatedAt.IsZero() {
		a.UpdatedAt = a.CreatedAt
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM principals WHERE id = ?`, a.PrincipalID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("principal %s: %w", a.PrincipalID, store.ErrNotFound)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO agents (`+agentColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.ID, a.Name, a.PrincipalID, a.OwnerID, a.Version, string(a.Spec), a.WebhookSecret, a.SandboxID, nanos(a.CreatedAt), nanos(a.UpdatedAt))
		if isUnique(err) {
			return fmt.Errorf("id or name in use: %w", store.ErrConflict)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO agent_versions (agent_id, version, spec, created_at, created_by) VALUES (?, 1, ?, ?, ?)`,
			a.ID, string(a.Spec), nanos(a.CreatedAt), a.OwnerID)
		return err
	})
	if err != nil {
		return fmt.Errorf("create agent %s: %w", a.Name, err)
	}
	return nil
}

// GetAgent implements store.AgentStore.
func (s *Store) GetAgent(ctx context.Context, id string) (store.Agent, error) {
	a, err := scanAgent(s.reader.QueryRowContext(ctx, `SELECT `+agentColumns+` FROM agents WHERE id = ?`, id))
	if err != nil {
		return store.Agent{}, fmt.Errorf("get agent %s: %w", id, err)
	}
	return a, nil
}

// GetAgentByName implements store.AgentStore.
func (s *Store) GetAgentByName(ctx context.Context, name string) (store.Agent, error) {
	a, err := scanAgent(s.reader.QueryRowContext(ctx, `SELECT `+agentColumns+` FROM agents WHERE name = ?`, name))
	if err != nil {
		return store.Agent{}, fmt.Errorf("get agent %s: %w", name, err)
	}
	return a, nil
}

// ListAgents implements store.AgentStore.
func (s *Store) ListAgents(ctx context.Context) ([]store.Agent, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+agentColumns+` FROM agents ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	defer rows.Close()
	var out []store.Agent
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, fmt.Errorf("list agents: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return out, nil
}

// UpdateAgentSpec implements store.AgentStore.
func (s *Store) UpdateAgentSpec(ctx context.Context, id string, spec json.RawMessage, by string, at time.Time) (store.Agent, error) {
	if len(spec) == 0 || !json.Valid(spec) {
		return store.Agent{}, fmt.Errorf("update agent %s: spec is not JSON: %w", id, store.ErrInvalid)
	}
	var out store.Agent
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		a, err := scanAgent(tx.QueryRowContext(ctx, `SELECT `+agentColumns+` FROM agents WHERE id = ?`, id))
		if err != nil {
			return err
		}
		a.Version++
		a.Spec = spec
		a.UpdatedAt = at
		if _, err := tx.ExecContext(ctx, `UPDATE agents SET version = ?, spec = ?, updated_at = ? WHERE id = ?`,
			a.Version, string(spec), nanos(at), id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO agent_versions (agent_id, version, spec, created_at, created_by) VALUES (?, ?, ?, ?, ?)`,
			id, a.Version, string(spec), nanos(at), by); err != nil {
			return err
		}
		out = a
		return nil
	})
	if err != nil {
		return store.Agent{}, fmt.Errorf("update agent %s: %w", id, err)
	}
	return out, nil
}

// SetAgentSandbox implements store.AgentStore.
func (s *Store) SetAgentSandbox(ctx context.Context, id, sandboxID string) error {
	res, err := s.writer.ExecContext(ctx, `UPDATE agents SET sandbox_id = ? WHERE id = ?`, sandboxID, id)
	if err != nil {
		return fmt.Errorf("set agent %s sandbox: %w", id, full(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set agent %s sandbox: %w", id, store.ErrNotFound)
	}
	return nil
}

// DeleteAgent implements store.AgentStore.
func (s *Store) DeleteAgent(ctx context.Context, id string) error {
	res, err := s.writer.ExecContext(ctx, `DELETE FROM agents WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete agent %s: %w", id, full(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete agent %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// ListAgentVersions implements store.AgentStore.
func (s *Store) ListAgentVersions(ctx context.Context, id string) ([]store.AgentVersion, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT agent_id, version, spec, created_at, created_by FROM agent_versions WHERE agent_id = ? ORDER BY version`, id)
	if err != nil {
		return nil, fmt.Errorf("list agent %s versions: %w", id, err)
	}
	defer rows.Close()
	var out []store.AgentVersion
	for rows.Next() {
		var v store.AgentVersion
		var spec string
		var at sql.NullInt64
		if err := rows.Scan(&v.AgentID, &v.Version, &spec, &at, &v.CreatedBy); err != nil {
			return nil, fmt.Errorf("list agent %s versions: %w", id, err)
		}
		v.Spec, v.CreatedAt = json.RawMessage(spec), fromNanos(at)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent %s versions: %w", id, err)
	}
	return out, nil
}

func validRun(r store.AgentRun) error {
	switch {
	case r.ID == "" || r.AgentID == "":
		return fmt.Errorf("id and agent are required: %w", store.ErrInvalid)
	case r.State != store.RunQueued && r.State != store.RunRunning && !store.RunTerminal(r.State):
		return fmt.Errorf("state %q: %w", r.State, store.ErrInvalid)
	case len(r.Input) == 0 || !json.Valid(r.Input):
		return fmt.Errorf("input is not JSON: %w", store.ErrInvalid)
	case r.CreatedAt.IsZero():
		return fmt.Errorf("created_at is required: %w", store.ErrInvalid)
	}
	return nil
}

func exitArg(c *int) any {
	if c == nil {
		return nil
	}
	return *c
}

// CreateAgentRun implements store.AgentStore.
func (s *Store) CreateAgentRun(ctx context.Context, r store.AgentRun) error {
	if err := validRun(r); err != nil {
		return fmt.Errorf("create agent run %s: %w", r.ID, err)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM agents WHERE id = ?`, r.AgentID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("agent %s: %w", r.AgentID, store.ErrNotFound)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO agent_runs (`+agentRunColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.AgentID, r.Version, r.Trigger, string(r.Input), r.State, r.Reason, r.SandboxID, r.KeyID, exitArg(r.ExitCode),
			r.CreatedBy, nanos(r.CreatedAt), nanos(r.StartedAt), nanos(r.EndedAt), r.LLMCalls, r.TokensIn, r.TokensOut, r.CostMicros)
		if isUnique(err) {
			return fmt.Errorf("id in use: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create agent run %s: %w", r.ID, err)
	}
	return nil
}

// GetAgentRun implements store.AgentStore.
func (s *Store) GetAgentRun(ctx context.Context, id string) (store.AgentRun, error) {
	r, err := scanAgentRun(s.reader.QueryRowContext(ctx, `SELECT `+agentRunColumns+` FROM agent_runs WHERE id = ?`, id))
	if err != nil {
		return store.AgentRun{}, fmt.Errorf("get agent run %s: %w", id, err)
	}
	return r, nil
}

// ListAgentRuns implements store.AgentStore.
func (s *Store) ListAgentRuns(ctx context.Context, f store.AgentRunFilter) ([]store.AgentRun, error) {
	var where []string
	var args []any
	if f.AgentID != "" {
		where = append(where, "agent_id = ?")
		args = append(args, f.AgentID)
	}
	if f.Trigger != "" {
		where = append(where, "trigger = ?")
		args = append(args, f.Trigger)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	q := `SELECT ` + agentRunColumns + ` FROM agent_runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultPageSize
	}
	if limit > store.MaxPageSize {
		limit = store.MaxPageSize
	}
	q += fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT %d", limit)
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list agent runs: %w", err)
	}
	defer rows.Close()
	var out []store.AgentRun
	for rows.Next() {
		r, err := scanAgentRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list agent runs: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent runs: %w", err)
	}
	return out, nil
}

// UpdateAgentRun implements store.AgentStore.
func (s *Store) UpdateAgentRun(ctx context.Context, id string, fn func(*store.AgentRun) error) (store.AgentRun, error) {
	var out store.AgentRun
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := scanAgentRun(tx.QueryRowContext(ctx, `SELECT `+agentRunColumns+` FROM agent_runs WHERE id = ?`, id))
		if err != nil {
			return err
		}
		n := r
		if err := fn(&n); err != nil {
			return err
		}
		if n.ID != r.ID || n.AgentID != r.AgentID {
			return fmt.Errorf("id or agent changed: %w", store.ErrInvalid)
		}
		if err := validRun(n); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE agent_runs SET version = ?, trigger = ?, input = ?, state = ?, reason = ?, sandbox_id = ?, key_id = ?,
			exit_code = ?, created_by = ?, started_at = ?, ended_at = ?, llm_calls = ?, tokens_in = ?, tokens_out = ?, cost_micros = ? WHERE id = ?`,
			n.Version, n.Trigger, string(n.Input), n.State, n.Reason, n.SandboxID, n.KeyID, exitArg(n.ExitCode), n.CreatedBy,
			nanos(n.StartedAt), nanos(n.EndedAt), n.LLMCalls, n.TokensIn, n.TokensOut, n.CostMicros, id)
		if err != nil {
			return err
		}
		out = n
		return nil
	})
	if err != nil {
		return store.AgentRun{}, fmt.Errorf("update agent run %s: %w", id, err)
	}
	return out, nil
}
