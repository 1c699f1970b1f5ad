package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.MemoryStore = (*Store)(nil)

const memoryColumns = `namespace, key, version, text, tags, sha256, forgotten, principal_id, agent, run_id, created_at,
	redacted_at, redacted_by, redact_reason`

// memoryLatest selects the latest version of each key of a namespace.
const memoryLatest = `SELECT ` + memoryColumns + ` FROM memory_versions v WHERE namespace = ? AND forgotten = 0
	AND version = (SELECT MAX(version) FROM memory_versions w WHERE w.namespace = v.namespace AND w.key = v.key)`

func scanMemory(sc scanner) (store.MemoryEntry, error) {
	var e store.MemoryEntry
	var tags string
	var forgotten int64
	var created, redacted sql.NullInt64
	err := sc.Scan(&e.Namespace, &e.Key, &e.Version, &e.Text, &tags, &e.SHA256, &forgotten, &e.PrincipalID, &e.Agent,
		&e.RunID, &created, &redacted, &e.RedactedBy, &e.RedactReason)
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal([]byte(tags), &e.Tags); err != nil {
		return e, fmt.Errorf("memory %s/%s tags: %w", e.Namespace, e.Key, err)
	}
	e.Forgotten = forgotten != 0
	e.CreatedAt, e.RedactedAt = fromNanos(created), fromNanos(redacted)
	return e, nil
}

func memoryLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}

// PutMemory implements store.MemoryStore.
func (s *Store) PutMemory(ctx context.Context, e store.MemoryEntry) (store.MemoryEntry, error) {
	switch {
	case e.Namespace == "" || e.Key == "":
		return e, fmt.Errorf("put memory: namespace and key are required: %w", store.ErrInvalid)
	case e.CreatedAt.IsZero():
		return e, fmt.Errorf("put memory: created_at is required: %w", store.ErrInvalid)
	}
	if e.Tags == nil {
		e.Tags = []string{}
	}
	tags, err := json.Marshal(e.Tags)
	if err != nil {
		return e, fmt.Errorf("put memory: %w", err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM memory_versions WHERE namespace = ? AND key = ?`,
			e.Namespace, e.Key).Scan(&e.Version); err != nil {
			return err
		}
		forgotten := 0
		if e.Forgotten {
			forgotten, e.Text, e.SHA256 = 1, "", ""
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO memory_versions (namespace, key, version, text, tags, sha256, forgotten,
			principal_id, agent, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Namespace, e.Key, e.Version, e.Text, string(tags), e.SHA256, forgotten, e.PrincipalID, e.Agent, e.RunID,
			nanos(e.CreatedAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM memory_fts WHERE namespace = ? AND key = ?`, e.Namespace, e.Key); err != nil {
			return err
		}
		if e.Forgotten {
			return nil
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO memory_fts (namespace, key, text, tags) VALUES (?, ?, ?, ?)`,
			e.Namespace, e.Key, e.Text, strings.Join(e.Tags, " "))
		return err
	})
	if err != nil {
		return e, fmt.Errorf("put memory %s/%s: %w", e.Namespace, e.Key, err)
	}
	return e, nil
}

// GetMemory implements store.MemoryStore.
func (s *Store) GetMemory(ctx context.Context, namespace, key string) (store.MemoryEntry, error) {
	e, err := scanMemory(s.reader.QueryRowContext(ctx, `SELECT `+memoryColumns+` FROM memory_versions
		WHERE namespace = ? AND key = ? ORDER BY version DESC LIMIT 1`, namespace, key))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && e.Forgotten) {
		return store.MemoryEntry{}, fmt.Errorf("memory %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	if err != nil {
		return store.MemoryEntry{}, fmt.Errorf("get memory %s/%s: %w", namespace, key, err)
	}
	return e, nil
}

// MemoryHistory implements store.MemoryStore.
func (s *Store) MemoryHistory(ctx context.Context, namespace, key string) ([]store.MemoryEntry, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+memoryColumns+` FROM memory_versions
		WHERE namespace = ? AND key = ? ORDER BY version`, namespace, key)
	if err != nil {
		return nil, fmt.Errorf("memory history %s/%s: %w", namespace, key, err)
	}
	out, err := collect(rows, scanMemory)
	if err != nil {
		return nil, fmt.Errorf("memory history %s/%s: %w", namespace, key, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("memory %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	return out, nil
}

// ListMemory implements store.MemoryStore.
func (s *Store) ListMemory(ctx context.Context, namespace string, f store.MemoryFilter) ([]store.MemoryEntry, error) {
	q := memoryLatest
	args := []any{namespace}
	if f.Prefix != "" {
		q += ` AND substr(key, 1, ?) = ?`
		args = append(args, len(f.Prefix), f.Prefix)
	}
	if f.Tag != "" {
		q += ` AND EXISTS (SELECT 1 FROM json_each(v.tags) WHERE value = ?)`
		args = append(args, f.Tag)
	}
	q += ` ORDER BY key LIMIT ?`
	args = append(args, memoryLimit(f.Limit))
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list memory %s: %w", namespace, err)
	}
	out, err := collect(rows, scanMemory)
	if err != nil {
		return nil, fmt.Errorf("list memory %s: %w", namespace, err)
	}
	return out, nil
}

// ftsQuery turns free text into an FTS5 query: each word a quoted prefix
// term, any of them matching ("" when the text has no word).
func ftsQuery(text string) string {
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	terms := make([]string, 0, len(words))
	for _, w := range words {
		if len(terms) == 32 {
			break
		}
		terms = append(terms, `"`+strings.ToLower(w)+`"*`)
	}
	return strings.Join(terms, " OR ")
}

// SearchMemory implements store.MemoryStore.
func (s *Store) SearchMemory(ctx context.Context, namespace, query string, f store.MemoryFilter) ([]store.MemoryEntry, error) {
	fq := ftsQuery(query)
	if fq == "" {
		return nil, fmt.Errorf("search memory: the query has no words: %w", store.ErrInvalid)
	}
	q := `SELECT ` + memoryColumns + ` FROM memory_versions v JOIN (SELECT key AS k, bm25(memory_fts) AS rank FROM memory_fts
		WHERE memory_fts MATCH ? AND namespace = ?) m ON m.k = v.key
		WHERE v.namespace = ? AND v.forgotten = 0 AND v.redacted_at IS NULL
		AND v.version = (SELECT MAX(version) FROM memory_versions w WHERE w.namespace = v.namespace AND w.key = v.key)`
	args := []any{fq, namespace, namespace}
	if f.Prefix != "" {
		q += ` AND substr(v.key, 1, ?) = ?`
		args = append(args, len(f.Prefix), f.Prefix)
	}
	if f.Tag != "" {
		q += ` AND EXISTS (SELECT 1 FROM json_each(v.tags) WHERE value = ?)`
		args = append(args, f.Tag)
	}
	q += ` ORDER BY m.rank, v.key LIMIT ?`
	args = append(args, memoryLimit(f.Limit))
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("search memory %s: %w", namespace, err)
	}
	out, err := collect(rows, scanMemory)
	if err != nil {
		return nil, fmt.Errorf("search memory %s: %w", namespace, err)
	}
	return out, nil
}

// RedactMemory implements store.MemoryStore.
func (s *Store) RedactMemory(ctx context.Context, namespace, key string, version int64, by, reason string, at time.Time) (int, error) {
	if at.IsZero() {
		return 0, fmt.Errorf("redact memory: at is required: %w", store.ErrInvalid)
	}
	var n int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Freed pages are zeroed, so the removed text does not linger in
		// the file.
		if _, err := tx.ExecContext(ctx, `PRAGMA secure_delete = ON`); err != nil {
			return err
		}
		var exists int
		q := `SELECT COUNT(*) FROM memory_versions WHERE namespace = ? AND key = ?`
		args := []any{namespace, key}
		if version > 0 {
			q += ` AND version = ?`
			args = append(args, version)
		}
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return store.ErrNotFound
		}
		u := `UPDATE memory_versions SET text = '', sha256 = '', redacted_at = ?, redacted_by = ?, redact_reason = ?
			WHERE namespace = ? AND key = ? AND redacted_at IS NULL AND forgotten = 0`
		uargs := []any{nanos(at), by, reason, namespace, key}
		if version > 0 {
			u += ` AND version = ?`
			uargs = append(uargs, version)
		}
		res, err := tx.ExecContext(ctx, u, uargs...)
		if err != nil {
			return err
		}
		rn, err := res.RowsAffected()
		if err != nil {
			return err
		}
		n = int(rn)
		// The search index holds the latest version's text: drop it when
		// that version is redacted now.
		var latestRedacted int
		if err := tx.QueryRowContext(ctx, `SELECT redacted_at IS NOT NULL FROM memory_versions WHERE namespace = ? AND key = ?
			ORDER BY version DESC LIMIT 1`, namespace, key).Scan(&latestRedacted); err != nil {
			return err
		}
		if latestRedacted != 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM memory_fts WHERE namespace = ? AND key = ?`, namespace, key); err != nil {
				return err
			}
			// Merge the index's segments, so the redacted text's terms
			// leave it too (a delete only marks them).
			if _, err := tx.ExecContext(ctx, `INSERT INTO memory_fts (memory_fts) VALUES ('optimize')`); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `PRAGMA secure_delete = OFF`)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("memory %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("redact memory %s/%s: %w", namespace, key, err)
	}
	// The write-ahead log still holds the pages as they were: copy it
	// into the database and empty it (best effort: a reader may hold it;
	// SQLite's next checkpoint does the same).
	_, _ = s.writer.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	return n, nil
}

// ExportMemory implements store.MemoryStore.
func (s *Store) ExportMemory(ctx context.Context, namespace string, fn func(store.MemoryEntry) error) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+memoryColumns+` FROM memory_versions WHERE namespace = ?
		ORDER BY key, version`, namespace)
	if err != nil {
		return fmt.Errorf("export memory %s: %w", namespace, err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanMemory(rows)
		if err != nil {
			return fmt.Errorf("export memory %s: %w", namespace, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("export memory %s: %w", namespace, err)
	}
	return nil
}
