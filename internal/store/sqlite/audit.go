package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEvent) error {
	if e.Seq <= 0 || e.Time.IsZero() {
		return fmt.Errorf("append audit event %d: seq and time are required: %w", e.Seq, store.ErrInvalid)
	}
	detail := string(e.Detail)
	if detail == "" {
		detail = "null"
	}
	_, err := s.stmts.insertAudit.ExecContext(ctx, e.Seq, nanos(e.Time), e.RequestID, e.PrincipalID,
		e.Action, e.Target, e.Outcome, detail, e.PrevHash, e.Hash)
	if isUnique(err) {
		return fmt.Errorf("append audit event %d: seq in use: %w", e.Seq, store.ErrConflict)
	}
	if err != nil {
		return full(fmt.Errorf("append audit event %d: %w", e.Seq, err))
	}
	return nil
}

// LastAudit implements store.Store.
func (s *Store) LastAudit(ctx context.Context) (store.AuditEvent, error) {
	e, err := scanAudit(s.stmts.lastAudit.QueryRowContext(ctx))
	if errors.Is(err, sql.ErrNoRows) {
		return store.AuditEvent{}, fmt.Errorf("last audit event: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.AuditEvent{}, fmt.Errorf("last audit event: %w", err)
	}
	return e, nil
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultPageSize
	}
	limit = min(limit, store.MaxPageSize)
	q := `SELECT ` + auditColumns + ` FROM audit_events WHERE seq > ?`
	args := []any{f.After}
	if f.Target != "" {
		q += ` AND target = ?`
		args = append(args, f.Target)
	}
	if f.PrincipalID != "" {
		q += ` AND principal_id = ?`
		args = append(args, f.PrincipalID)
	}
	if f.Action != "" {
		q += ` AND action = ?`
		args = append(args, f.Action)
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, limit)
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEvent
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("list audit events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return out, nil
}

// WalkAudit implements store.Store. It runs one SELECT, which SQLite serves
// from a single read snapshot while appends continue on the writer.
func (s *Store) WalkAudit(ctx context.Context, fn func(store.AuditEvent) error) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+auditColumns+` FROM audit_events ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("walk audit events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return fmt.Errorf("walk audit events: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("walk audit events: %w", err)
	}
	return nil
}

func scanAudit(r scanner) (store.AuditEvent, error) {
	var (
		e      store.AuditEvent
		t      sql.NullInt64
		detail string
	)
	if err := r.Scan(&e.Seq, &t, &e.RequestID, &e.PrincipalID, &e.Action, &e.Target, &e.Outcome,
		&detail, &e.PrevHash, &e.Hash); err != nil {
		return store.AuditEvent{}, err
	}
	e.Time = fromNanos(t)
	e.Detail = []byte(detail)
	return e, nil
}
