package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.MonitorStore = (*Store)(nil)

const monitorColumns = `seq, id, time, kind, source, principal_id, agent_id, sandbox_id, session_id, action, target,
	outcome, rule_id, detail, content, content_sha256, redacted_at, audit_seq`

const (
	monitorChunk  = 64 // rows per INSERT: 17 parameters each, well under SQLite's limit
	monitorInsert = `INSERT INTO monitor_events (id, time, kind, source, principal_id, agent_id, sandbox_id, session_id,
		action, target, outcome, rule_id, detail, content, content_sha256, redacted_at, audit_seq) VALUES `
	monitorRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// AppendMonitorEvents implements store.MonitorStore.
func (s *Store) AppendMonitorEvents(ctx context.Context, evs []store.MonitorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	for i := range evs {
		e := &evs[i]
		switch {
		case e.ID == "":
			return fmt.Errorf("append monitor events: event %d: empty id: %w", i, store.ErrInvalid)
		case e.Kind == "":
			return fmt.Errorf("append monitor events: event %s: empty kind: %w", e.ID, store.ErrInvalid)
		case e.Time.IsZero():
			return fmt.Errorf("append monitor events: event %s: no time: %w", e.ID, store.ErrInvalid)
		}
	}
	// Multi-row inserts of up to monitorChunk rows: within the write
	// transaction (one writer) an AUTOINCREMENT insert numbers its rows
	// consecutively, so each row's seq follows from the last one.
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for lo := 0; lo < len(evs); lo += monitorChunk {
			chunk := evs[lo:min(lo+monitorChunk, len(evs))]
			q := monitorInsert + strings.Repeat(monitorRow+", ", len(chunk)-1) + monitorRow
			args := make([]any, 0, len(chunk)*17)
			for i := range chunk {
				e := &chunk[i]
				args = append(args, e.ID, e.Time.UnixNano(), e.Kind, e.Source, e.Principal, e.Agent,
					e.Sandbox, e.Session, e.Action, e.Target, e.Outcome, e.RuleID, string(e.Detail), e.Content,
					e.ContentSHA256, nanos(e.RedactedAt), e.AuditSeq)
			}
			res, err := tx.ExecContext(ctx, q, args...)
			if isUnique(err) {
				return fmt.Errorf("an event id is in use: %w", store.ErrConflict)
			}
			if err != nil {
				return err
			}
			last, err := res.LastInsertId()
			if err != nil {
				return err
			}
			for i := range chunk {
				chunk[i].Seq = last - int64(len(chunk)-1-i)
			}
		}
		return nil
	})
	if err != nil {
		for i := range evs {
			evs[i].Seq = 0
		}
		return fmt.Errorf("append monitor events: %w", err)
	}
	return nil
}

// ListMonitorEvents implements store.MonitorStore.
func (s *Store) ListMonitorEvents(ctx context.Context, f store.MonitorFilter) ([]store.MonitorEvent, error) {
	var where []string
	var args []any
	eq := func(col, v string) {
		if v != "" {
			where = append(where, col+" = ?")
			args = append(args, v)
		}
	}
	eq("agent_id", f.Agent)
	eq("principal_id", f.Principal)
	eq("sandbox_id", f.Sandbox)
	eq("session_id", f.Session)
	if len(f.Kinds) > 0 {
		var or []string
		for _, k := range f.Kinds {
			if strings.HasSuffix(k, ".") {
				or = append(or, "substr(kind, 1, ?) = ?")
				args = append(args, len(k), k)
			} else {
				or = append(or, "kind = ?")
				args = append(args, k)
			}
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		where = append(where, "time < ?")
		args = append(args, f.Until.UnixNano())
	}
	if f.After > 0 {
		where = append(where, "seq > ?")
		args = append(args, f.After)
	}
	q := `SELECT ` + monitorColumns + ` FROM monitor_events`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	if f.Tail && f.Limit > 0 {
		q = `SELECT * FROM (` + q + ` ORDER BY seq DESC LIMIT ?) ORDER BY seq`
		args = append(args, f.Limit)
	} else {
		q += ` ORDER BY seq`
		if f.Limit > 0 {
			q += ` LIMIT ?`
			args = append(args, f.Limit)
		}
	}
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list monitor events: %w", err)
	}
	out, err := collect(rows, scanMonitorEvent)
	if err != nil {
		return nil, fmt.Errorf("list monitor events: %w", err)
	}
	return out, nil
}

// GetMonitorEvent implements store.MonitorStore.
func (s *Store) GetMonitorEvent(ctx context.Context, id string) (store.MonitorEvent, error) {
	return s.getMonitorEvent(ctx, s.reader, id)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) getMonitorEvent(ctx context.Context, db queryRower, id string) (store.MonitorEvent, error) {
	e, err := scanMonitorEvent(db.QueryRowContext(ctx, `SELECT `+monitorColumns+` FROM monitor_events WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.MonitorEvent{}, fmt.Errorf("monitor event %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.MonitorEvent{}, fmt.Errorf("get monitor event %s: %w", id, err)
	}
	return e, nil
}

// RedactMonitorEvent implements store.MonitorStore.
func (s *Store) RedactMonitorEvent(ctx context.Context, id string, at time.Time) (store.MonitorEvent, error) {
	var out store.MonitorEvent
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE monitor_events SET content = '', redacted_at = coalesce(redacted_at, ?) WHERE id = ?`,
			at.UnixNano(), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("monitor event %s: %w", id, store.ErrNotFound)
		}
		out, err = s.getMonitorEvent(ctx, tx, id)
		return err
	})
	if err != nil {
		return store.MonitorEvent{}, fmt.Errorf("redact monitor event: %w", err)
	}
	return out, nil
}

// ExpireMonitorContent implements store.MonitorStore.
func (s *Store) ExpireMonitorContent(ctx context.Context, before, at time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE monitor_events SET content = '', redacted_at = ?
			WHERE time < ? AND content != ''`, at.UnixNano(), before.UnixNano())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("expire monitor content: %w", err)
	}
	return n, nil
}

// DeleteMonitorEvents implements store.MonitorStore.
func (s *Store) DeleteMonitorEvents(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM monitor_events WHERE time < ?`, before.UnixNano())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete monitor events: %w", err)
	}
	return n, nil
}

func scanMonitorEvent(r scanner) (store.MonitorEvent, error) {
	var e store.MonitorEvent
	var t int64
	var detail string
	var redacted sql.NullInt64
	err := r.Scan(&e.Seq, &e.ID, &t, &e.Kind, &e.Source, &e.Principal, &e.Agent, &e.Sandbox, &e.Session, &e.Action,
		&e.Target, &e.Outcome, &e.RuleID, &detail, &e.Content, &e.ContentSHA256, &redacted, &e.AuditSeq)
	if err != nil {
		return store.MonitorEvent{}, err
	}
	e.Time = time.Unix(0, t).UTC()
	e.RedactedAt = fromNanos(redacted)
	if detail != "" {
		e.Detail = []byte(detail)
	}
	return e, nil
}
