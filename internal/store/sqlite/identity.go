package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// CreatePrincipal implements store.Store.
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal, keys ...store.APIKey) error {
	if err := validPrincipal(p); err != nil {
		return fmt.Errorf("create principal: %w", err)
	}
	for _, k := range keys {
		if k.PrincipalID != p.ID {
			return fmt.Errorf("create principal %s: key %s belongs to %q: %w", p.ID, k.ID, k.PrincipalID, store.ErrInvalid)
		}
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var createdBy any
		if p.CreatedBy != "" {
			createdBy = p.CreatedBy
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO principals (`+principalColumns+`) VALUES (?, ?, ?, ?, ?)`,
			p.ID, p.Kind, p.Name, createdBy, nanos(p.CreatedAt))
		switch {
		case isUnique(err):
			return fmt.Errorf("id in use: %w", store.ErrConflict)
		case isForeignKey(err):
			return fmt.Errorf("created_by %s: %w", p.CreatedBy, store.ErrNotFound)
		case err != nil:
			return err
		}
		for _, k := range keys {
			if err := insertKey(ctx, tx, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create principal %s: %w", p.ID, err)
	}
	return nil
}

// GetPrincipal implements store.Store.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	p, err := scanPrincipal(s.stmts.getPrincipal.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Principal{}, fmt.Errorf("principal %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Principal{}, fmt.Errorf("get principal %s: %w", id, err)
	}
	return p, nil
}

// ListPrincipals implements store.Store.
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+principalColumns+` FROM principals ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list principals: %w", err)
	}
	defer rows.Close()
	var out []store.Principal
	for rows.Next() {
		p, err := scanPrincipal(rows)
		if err != nil {
			return nil, fmt.Errorf("list principals: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list principals: %w", err)
	}
	return out, nil
}

// CountPrincipals implements store.Store.
func (s *Store) CountPrincipals(ctx context.Context) (int, error) {
	var n int
	if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM principals`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count principals: %w", err)
	}
	return n, nil
}

// CreateKey implements store.Store.
func (s *Store) CreateKey(ctx context.Context, k store.APIKey) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error { return insertKey(ctx, tx, k) })
	if err != nil {
		return fmt.Errorf("create key: %w", err)
	}
	return nil
}

// GetKeyByID implements store.Store.
func (s *Store) GetKeyByID(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanKey(s.stmts.getKey.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("api key %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("get api key %s: %w", id, err)
	}
	return k, nil
}

// ListKeys implements store.Store.
func (s *Store) ListKeys(ctx context.Context, principalID string) ([]store.APIKey, error) {
	q := `SELECT ` + keyColumns + ` FROM api_keys`
	var args []any
	if principalID != "" {
		q += ` WHERE principal_id = ?`
		args = append(args, principalID)
	}
	q += ` ORDER BY created_at, id`
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// RevokeKey implements store.Store.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (store.APIKey, error) {
	if at.IsZero() {
		return store.APIKey{}, fmt.Errorf("revoke api key %s: zero time: %w", id, store.ErrInvalid)
	}
	var out store.APIKey
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
			nanos(at), id); err != nil {
			return err
		}
		k, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		out = k
		return err
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("revoke api key %s: %w", id, err)
	}
	return out, nil
}

// TouchKey implements store.Store.
func (s *Store) TouchKey(ctx context.Context, id string, at time.Time) error {
	if _, err := s.stmts.touchKey.ExecContext(ctx, nanos(at), id); err != nil {
		return fmt.Errorf("touch api key %s: %w", id, err)
	}
	return nil
}

func insertKey(ctx context.Context, tx *sql.Tx, k store.APIKey) error {
	if err := validKey(k); err != nil {
		return err
	}
	scopes, err := json.Marshal(nonNil(k.Scopes))
	if err != nil {
		return fmt.Errorf("api key %s: encode scopes: %w", k.ID, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (`+keyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.PrincipalID, k.Name, k.Prefix, k.Hash, string(scopes),
		nanos(k.CreatedAt), nanos(k.RevokedAt), nanos(k.LastUsedAt))
	switch {
	case isUnique(err):
		return fmt.Errorf("api key %s: id in use: %w", k.ID, store.ErrConflict)
	case isForeignKey(err):
		return fmt.Errorf("api key %s: principal %s: %w", k.ID, k.PrincipalID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("api key %s: %w", k.ID, err)
	}
	return nil
}

func validPrincipal(p store.Principal) error {
	switch {
	case p.ID == "":
		return fmt.Errorf("empty principal id: %w", store.ErrInvalid)
	case p.Kind != store.PrincipalUser && p.Kind != store.PrincipalAgent:
		return fmt.Errorf("principal %s: kind %q: want user or agent: %w", p.ID, p.Kind, store.ErrInvalid)
	case p.CreatedAt.IsZero():
		return fmt.Errorf("principal %s: zero created_at: %w", p.ID, store.ErrInvalid)
	}
	return nil
}

func validKey(k store.APIKey) error {
	switch {
	case k.ID == "":
		return fmt.Errorf("empty api key id: %w", store.ErrInvalid)
	case k.PrincipalID == "":
		return fmt.Errorf("api key %s: empty principal: %w", k.ID, store.ErrInvalid)
	case k.Hash == "":
		return fmt.Errorf("api key %s: empty hash: %w", k.ID, store.ErrInvalid)
	case k.CreatedAt.IsZero():
		return fmt.Errorf("api key %s: zero created_at: %w", k.ID, store.ErrInvalid)
	}
	return nil
}

func scanPrincipal(r scanner) (store.Principal, error) {
	var (
		p         store.Principal
		createdBy sql.NullString
		created   sql.NullInt64
	)
	if err := r.Scan(&p.ID, &p.Kind, &p.Name, &createdBy, &created); err != nil {
		return store.Principal{}, err
	}
	p.CreatedBy = createdBy.String
	p.CreatedAt = fromNanos(created)
	return p, nil
}

func scanKey(r scanner) (store.APIKey, error) {
	var (
		k                      store.APIKey
		scopes                 string
		created, revoked, used sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.PrincipalID, &k.Name, &k.Prefix, &k.Hash, &scopes, &created, &revoked, &used); err != nil {
		return store.APIKey{}, err
	}
	if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
		return store.APIKey{}, fmt.Errorf("api key %s: decode scopes: %w", k.ID, err)
	}
	k.CreatedAt, k.RevokedAt, k.LastUsedAt = fromNanos(created), fromNanos(revoked), fromNanos(used)
	return k, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
