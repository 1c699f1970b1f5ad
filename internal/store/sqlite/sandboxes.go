package sqlite

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/store"
)

// CreateSandbox implements store.Store.
func (s *Store) CreateSandbox(ctx context.Context, sb store.Sandbox) error {
	if err := validSandbox(sb); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	args, _, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.StmtContext(ctx, s.stmts.insertSandbox).ExecContext(ctx, args...); err != nil {
			return err
		}
		return s.insertMetadata(ctx, tx, sb.ID, sb.Metadata)
	})
	switch {
	case isNameTaken(err):
		return fmt.Errorf("create sandbox %s: name %q: %w", sb.ID, sb.Name, store.ErrNameInUse)
	case isUnique(err):
		return fmt.Errorf("create sandbox %s: id in use: %w", sb.ID, store.ErrConflict)
	case isForeignKey(err):
		return fmt.Errorf("create sandbox %s: owner %s: %w", sb.ID, sb.Owner, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := scanSandbox(s.stmts.getSandbox.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// UpdateSandbox implements store.Store. The transaction holds SQLite's
// write lock from its first statement (BEGIN IMMEDIATE), so the row fn
// sees cannot change before the update is written. fn runs exactly once.
// fn must not call the store: the single writer connection is busy.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*store.Sandbox) error) (store.Sandbox, error) {
	var out store.Sandbox
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var oldMeta string
		sb, err := scanSandboxMeta(tx.StmtContext(ctx, s.stmts.lockSandbox).QueryRowContext(ctx, id), &oldMeta)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := fn(&sb); err != nil {
			return err
		}
		if sb.ID != id {
			return fmt.Errorf("sandbox id changed from %s to %s: %w", id, sb.ID, store.ErrInvalid)
		}
		if err := validSandbox(sb); err != nil {
			return err
		}
		args, newMeta, err := sandboxArgs(sb)
		if err != nil {
			return err
		}
		// UPDATE ... SET every column but id, WHERE id = ?.
		args = append(args[1:], id)
		if _, err := tx.StmtContext(ctx, s.stmts.updateSandbox).ExecContext(ctx, args...); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("owner %s: %w", sb.Owner, store.ErrNotFound)
			}
			if isNameTaken(err) {
				return fmt.Errorf("name %q: %w", sb.Name, store.ErrNameInUse)
			}
			return err
		}
		if newMeta != oldMeta {
			if _, err := tx.StmtContext(ctx, s.stmts.deleteMeta).ExecContext(ctx, id); err != nil {
				return err
			}
			if err := s.insertMetadata(ctx, tx, id, sb.Metadata); err != nil {
				return err
			}
		}
		out = sb
		return nil
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("update sandbox %s: %w", id, err)
	}
	return out, nil
}

// DeleteSandbox implements store.Store.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	res, err := s.writer.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("delete sandbox %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// ListSandboxes implements store.Store.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultPageSize
	}
	limit = min(limit, store.MaxPageSize)

	var (
		where []string
		args  []any
	)
	if f.Owner != "" {
		where = append(where, `s.owner = ?`)
		args = append(args, f.Owner)
	}
	if f.Name != "" {
		where = append(where, `s.name = ?`)
		args = append(args, f.Name)
	}
	if len(f.States) > 0 {
		where = append(where, `s.state IN (?`+strings.Repeat(`, ?`, len(f.States)-1)+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		where = append(where, `EXISTS (SELECT 1 FROM sandbox_metadata m WHERE m.sandbox_id = s.id AND m.key = ? AND m.value = ?)`)
		args = append(args, k, f.Metadata[k])
	}
	if f.PageToken != "" {
		created, id, err := decodePageToken(f.PageToken)
		if err != nil {
			return nil, "", fmt.Errorf("list sandboxes: %w", err)
		}
		where = append(where, `(s.created_at, s.id) < (?, ?)`)
		args = append(args, created, id)
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes s`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY s.created_at DESC, s.id DESC LIMIT ?`
	args = append(args, limit+1)

	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []store.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = encodePageToken(last.CreatedAt.UnixNano(), last.ID)
	}
	return out, next, nil
}

func (s *Store) insertMetadata(ctx context.Context, tx *sql.Tx, id string, md map[string]string) error {
	if len(md) == 0 {
		return nil
	}
	stmt := tx.StmtContext(ctx, s.stmts.insertMeta)
	for k, v := range md {
		if _, err := stmt.ExecContext(ctx, id, k, v); err != nil {
			return err
		}
	}
	return nil
}

func validSandbox(sb store.Sandbox) error {
	switch {
	case sb.ID == "":
		return fmt.Errorf("empty sandbox id: %w", store.ErrInvalid)
	case sb.Owner == "":
		return fmt.Errorf("sandbox %s: empty owner: %w", sb.ID, store.ErrInvalid)
	case sb.CreatedAt.IsZero():
		return fmt.Errorf("sandbox %s: zero created_at: %w", sb.ID, store.ErrInvalid)
	case len(sb.Handle) > 0 && !json.Valid(sb.Handle):
		return fmt.Errorf("sandbox %s: handle is not valid json: %w", sb.ID, store.ErrInvalid)
	}
	return nil
}

// sandboxArgs returns the column values of sb in sandboxColumns order and
// the encoded metadata.
func sandboxArgs(sb store.Sandbox) ([]any, string, error) {
	env, err := encodeMap(sb.Env)
	if err != nil {
		return nil, "", fmt.Errorf("encode env: %w", err)
	}
	meta, err := encodeMap(sb.Metadata)
	if err != nil {
		return nil, "", fmt.Errorf("encode metadata: %w", err)
	}
	lc, err := json.Marshal(sb.Lifecycle)
	if err != nil {
		return nil, "", fmt.Errorf("encode lifecycle: %w", err)
	}
	lifecycle := string(lc)
	var handle any
	if len(sb.Handle) > 0 {
		handle = []byte(sb.Handle)
	}
	return []any{
		sb.ID, sb.Template, sb.State, sb.Owner, sb.Backend, sb.CPUMillis, sb.MemoryMB, sb.DiskMB,
		env, meta, sb.User, sb.Workdir,
		nanos(sb.CreatedAt), nanos(sb.StartedAt), nanos(sb.ExpiresAt), nanos(sb.EndedAt), sb.EndReason, handle,
		sb.TemplateID, lifecycle, string(sb.Network), sb.EnvdKey, sb.Name,
	}, meta, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(r scanner) (store.Sandbox, error) {
	var meta string
	return scanSandboxMeta(r, &meta)
}

// scanSandboxMeta scans one sandbox row and also returns its raw metadata
// column, which UpdateSandbox compares to decide whether the metadata index
// rows need rewriting.
func scanSandboxMeta(r scanner, meta *string) (store.Sandbox, error) {
	var (
		sb                               store.Sandbox
		env                              string
		created, started, expires, ended sql.NullInt64
		handle                           []byte
		lifecycle                        string
		netw                             string
	)
	err := r.Scan(&sb.ID, &sb.Template, &sb.State, &sb.Owner, &sb.Backend, &sb.CPUMillis, &sb.MemoryMB, &sb.DiskMB,
		&env, meta, &sb.User, &sb.Workdir, &created, &started, &expires, &ended, &sb.EndReason, &handle, &sb.TemplateID, &lifecycle, &netw, &sb.EnvdKey, &sb.Name)
	if err != nil {
		return store.Sandbox{}, err
	}
	if netw != "" {
		sb.Network = json.RawMessage(netw)
	}
	if err := json.Unmarshal([]byte(lifecycle), &sb.Lifecycle); err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: decode lifecycle: %w", sb.ID, err)
	}
	if sb.Env, err = decodeMap(env); err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: decode env: %w", sb.ID, err)
	}
	if sb.Metadata, err = decodeMap(*meta); err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: decode metadata: %w", sb.ID, err)
	}
	sb.CreatedAt, sb.StartedAt, sb.ExpiresAt, sb.EndedAt = fromNanos(created), fromNanos(started), fromNanos(expires), fromNanos(ended)
	if len(handle) > 0 {
		sb.Handle = json.RawMessage(handle)
	}
	return sb, nil
}

// encodeMap encodes a string map as JSON with sorted keys ("{}" when
// empty), so equal maps have equal encodings.
func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// decodeMap decodes what encodeMap wrote; it never returns nil.
func decodeMap(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" || s == "{}" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Page tokens are "v1.<created_at unix nanos>.<id>" in unpadded base64url:
// the sort key of the last row of the previous page.
const pageTokenVersion = "v1"

func encodePageToken(created int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenVersion + "." + strconv.FormatInt(created, 10) + "." + id))
}

func decodePageToken(tok string) (int64, string, error) {
	bad := fmt.Errorf("malformed page token: %w", store.ErrInvalid)
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", bad
	}
	parts := strings.SplitN(string(raw), ".", 3)
	if len(parts) != 3 || parts[0] != pageTokenVersion || parts[2] == "" {
		return 0, "", bad
	}
	created, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", bad
	}
	return created, parts[2], nil
}
