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

var _ store.GovernStore = (*Store)(nil)

const policyColumns = `id, name, version, scope_kind, scope_id, document, created_at, created_by, updated_at, updated_by`

const approvalColumns = `id, digest, principal_id, owner_id, kind, target, rule_id, policy_id, policy_version,
	approvers, message, action, state, created_at, expires_at, decided_by, decided_at, reason, consumed_at`

func validPolicy(p store.Policy) error {
	switch {
	case p.ID == "":
		return fmt.Errorf("empty id: %w", store.ErrInvalid)
	case p.CreatedAt.IsZero() || p.UpdatedAt.IsZero():
		return fmt.Errorf("created_at and updated_at are required: %w", store.ErrInvalid)
	case len(p.Document) == 0 || !json.Valid(p.Document):
		return fmt.Errorf("document is not JSON: %w", store.ErrInvalid)
	}
	return nil
}

// CreatePolicy implements store.GovernStore.
func (s *Store) CreatePolicy(ctx context.Context, p store.Policy) (store.Policy, error) {
	p.Version = 1
	p.DeletedAt = time.Time{}
	if err := validPolicy(p); err != nil {
		return store.Policy{}, fmt.Errorf("create policy %s: %w", p.ID, err)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO policies (`+policyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.Name, p.Version, p.ScopeKind, p.ScopeID, string(p.Document),
			nanos(p.CreatedAt), p.CreatedBy, nanos(p.UpdatedAt), p.UpdatedBy)
		if isUnique(err) {
			return fmt.Errorf("id in use: %w", store.ErrConflict)
		}
		if err != nil {
			return err
		}
		return insertPolicyVersion(ctx, tx, p)
	})
	if err != nil {
		return store.Policy{}, fmt.Errorf("create policy %s: %w", p.ID, err)
	}
	return p, nil
}

func insertPolicyVersion(ctx context.Context, tx *sql.Tx, p store.Policy) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO policy_versions
		(policy_id, version, name, scope_kind, scope_id, document, created_at, created_by)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.Version, p.Name, p.ScopeKind, p.ScopeID, string(p.Document), nanos(p.UpdatedAt), p.UpdatedBy)
	if isUnique(err) {
		// A deleted policy's history is kept; its ID cannot be reused
		// while the history names it.
		return fmt.Errorf("version %d of policy %s already recorded: %w", p.Version, p.ID, store.ErrConflict)
	}
	return err
}

// GetPolicy implements store.GovernStore.
func (s *Store) GetPolicy(ctx context.Context, id string) (store.Policy, error) {
	p, err := scanPolicy(s.reader.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policies WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Policy{}, fmt.Errorf("policy %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Policy{}, fmt.Errorf("get policy %s: %w", id, err)
	}
	return p, nil
}

// GetPolicyVersion implements store.GovernStore.
func (s *Store) GetPolicyVersion(ctx context.Context, id string, version int64) (store.Policy, error) {
	var (
		p              store.Policy
		doc            string
		created, del   sql.NullInt64
		first          sql.NullInt64
		firstCreatedBy sql.NullString
	)
	err := s.reader.QueryRowContext(ctx, `SELECT v.policy_id, v.version, v.name, v.scope_kind, v.scope_id, v.document,
			v.created_at, v.created_by, v.deleted_at, f.created_at, f.created_by
		FROM policy_versions v LEFT JOIN policy_versions f ON f.policy_id = v.policy_id AND f.version = 1
		WHERE v.policy_id = ? AND v.version = ?`, id, version).
		Scan(&p.ID, &p.Version, &p.Name, &p.ScopeKind, &p.ScopeID, &doc, &created, &p.UpdatedBy, &del, &first, &firstCreatedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Policy{}, fmt.Errorf("policy %s version %d: %w", id, version, store.ErrNotFound)
	}
	if err != nil {
		return store.Policy{}, fmt.Errorf("get policy %s version %d: %w", id, version, err)
	}
	p.Document = json.RawMessage(doc)
	p.UpdatedAt = fromNanos(created)
	p.DeletedAt = fromNanos(del)
	p.CreatedAt = fromNanos(first)
	p.CreatedBy = firstCreatedBy.String
	return p, nil
}

// ListPolicies implements store.GovernStore.
func (s *Store) ListPolicies(ctx context.Context) ([]store.Policy, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+policyColumns+` FROM policies ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	defer rows.Close()
	var out []store.Policy
	for rows.Next() {
		p, err := scanPolicy(rows)
		if err != nil {
			return nil, fmt.Errorf("list policies: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	return out, nil
}

// UpdatePolicy implements store.GovernStore.
func (s *Store) UpdatePolicy(ctx context.Context, id string, fn func(*store.Policy) error) (store.Policy, error) {
	var out store.Policy
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		p, err := scanPolicy(tx.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policies WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		prev := p.Version
		if err := fn(&p); err != nil {
			return err
		}
		if p.ID != id || p.Version != prev {
			return fmt.Errorf("the update changed the id or version: %w", store.ErrInvalid)
		}
		p.Version = prev + 1
		p.DeletedAt = time.Time{}
		if err := validPolicy(p); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE policies SET name = ?, version = ?, scope_kind = ?, scope_id = ?,
				document = ?, created_at = ?, created_by = ?, updated_at = ?, updated_by = ? WHERE id = ?`,
			p.Name, p.Version, p.ScopeKind, p.ScopeID, string(p.Document), nanos(p.CreatedAt), p.CreatedBy,
			nanos(p.UpdatedAt), p.UpdatedBy, p.ID); err != nil {
			return err
		}
		if err := insertPolicyVersion(ctx, tx, p); err != nil {
			return err
		}
		out = p
		return nil
	})
	if err != nil {
		return store.Policy{}, fmt.Errorf("update policy %s: %w", id, err)
	}
	return out, nil
}

// DeletePolicy implements store.GovernStore.
func (s *Store) DeletePolicy(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		at = time.Now()
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM policies WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrNotFound
		}
		_, err = tx.ExecContext(ctx, `UPDATE policy_versions SET deleted_at = ? WHERE policy_id = ? AND deleted_at IS NULL`,
			nanos(at), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete policy %s: %w", id, err)
	}
	return nil
}

func scanPolicy(r scanner) (store.Policy, error) {
	var (
		p                store.Policy
		doc              string
		created, updated sql.NullInt64
	)
	if err := r.Scan(&p.ID, &p.Name, &p.Version, &p.ScopeKind, &p.ScopeID, &doc, &created, &p.CreatedBy,
		&updated, &p.UpdatedBy); err != nil {
		return store.Policy{}, err
	}
	p.Document = json.RawMessage(doc)
	p.CreatedAt = fromNanos(created)
	p.UpdatedAt = fromNanos(updated)
	return p, nil
}

func validApproval(a store.Approval) error {
	switch {
	case a.ID == "" || a.Digest == "" || a.PrincipalID == "":
		return fmt.Errorf("id, digest and principal are required: %w", store.ErrInvalid)
	case a.CreatedAt.IsZero() || a.ExpiresAt.IsZero():
		return fmt.Errorf("created_at and expires_at are required: %w", store.ErrInvalid)
	case len(a.Action) == 0 || !json.Valid(a.Action):
		return fmt.Errorf("action is not JSON: %w", store.ErrInvalid)
	}
	switch a.State {
	case "pending", "approved", "rejected", "expired":
	default:
		return fmt.Errorf("state %q: %w", a.State, store.ErrInvalid)
	}
	return nil
}

func approvalArgs(a store.Approval) ([]any, error) {
	approvers := a.Approvers
	if approvers == nil {
		approvers = []string{}
	}
	ab, err := json.Marshal(approvers)
	if err != nil {
		return nil, err
	}
	return []any{a.ID, a.Digest, a.PrincipalID, a.OwnerID, a.Kind, a.Target, a.RuleID, a.PolicyID, a.PolicyVersion,
		string(ab), a.Message, string(a.Action), a.State, nanos(a.CreatedAt), nanos(a.ExpiresAt), a.DecidedBy,
		nanos(a.DecidedAt), a.Reason, nanos(a.ConsumedAt)}, nil
}

// CreateApproval implements store.GovernStore.
func (s *Store) CreateApproval(ctx context.Context, a store.Approval) error {
	if err := validApproval(a); err != nil {
		return fmt.Errorf("create approval %s: %w", a.ID, err)
	}
	args, err := approvalArgs(a)
	if err != nil {
		return fmt.Errorf("create approval %s: %w", a.ID, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
		if isUnique(err) {
			return fmt.Errorf("id in use: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create approval %s: %w", a.ID, err)
	}
	return nil
}

// GetApproval implements store.GovernStore.
func (s *Store) GetApproval(ctx context.Context, id string) (store.Approval, error) {
	a, err := scanApproval(s.reader.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Approval{}, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Approval{}, fmt.Errorf("get approval %s: %w", id, err)
	}
	return a, nil
}

// UpdateApproval implements store.GovernStore.
func (s *Store) UpdateApproval(ctx context.Context, id string, fn func(*store.Approval) error) (store.Approval, error) {
	var out store.Approval
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		a, err := scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := fn(&a); err != nil {
			return err
		}
		if a.ID != id {
			return fmt.Errorf("the update changed the id: %w", store.ErrInvalid)
		}
		if err := validApproval(a); err != nil {
			return err
		}
		args, err := approvalArgs(a)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE approvals SET digest = ?2, principal_id = ?3, owner_id = ?4, kind = ?5,
				target = ?6, rule_id = ?7, policy_id = ?8, policy_version = ?9, approvers = ?10, message = ?11,
				action = ?12, state = ?13, created_at = ?14, expires_at = ?15, decided_by = ?16, decided_at = ?17,
				reason = ?18, consumed_at = ?19 WHERE id = ?1`, args...); err != nil {
			return err
		}
		out = a
		return nil
	})
	if err != nil {
		return store.Approval{}, fmt.Errorf("update approval %s: %w", id, err)
	}
	return out, nil
}

// ListApprovals implements store.GovernStore.
func (s *Store) ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultPageSize
	}
	limit = min(limit, store.MaxPageSize)
	q := `SELECT ` + approvalColumns + ` FROM approvals WHERE 1 = 1`
	var args []any
	if f.Digest != "" {
		q += ` AND digest = ?`
		args = append(args, f.Digest)
	}
	if f.PrincipalID != "" {
		q += ` AND principal_id = ?`
		args = append(args, f.PrincipalID)
	}
	if len(f.States) > 0 {
		q += ` AND state IN (?` + strings.Repeat(`, ?`, len(f.States)-1) + `)`
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	defer rows.Close()
	var out []store.Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("list approvals: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	return out, nil
}

func scanApproval(r scanner) (store.Approval, error) {
	var (
		a                                   store.Approval
		approvers, action                   string
		created, expires, decided, consumed sql.NullInt64
	)
	if err := r.Scan(&a.ID, &a.Digest, &a.PrincipalID, &a.OwnerID, &a.Kind, &a.Target, &a.RuleID, &a.PolicyID,
		&a.PolicyVersion, &approvers, &a.Message, &action, &a.State, &created, &expires, &a.DecidedBy, &decided,
		&a.Reason, &consumed); err != nil {
		return store.Approval{}, err
	}
	if err := json.Unmarshal([]byte(approvers), &a.Approvers); err != nil {
		return store.Approval{}, fmt.Errorf("approval %s: approvers: %w", a.ID, err)
	}
	a.Action = json.RawMessage(action)
	a.CreatedAt = fromNanos(created)
	a.ExpiresAt = fromNanos(expires)
	a.DecidedAt = fromNanos(decided)
	a.ConsumedAt = fromNanos(consumed)
	return a, nil
}
