package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

const sandboxColumns = `id, template, state, owner, backend, cpu_millis, memory_mb, disk_mb,
	env, metadata, user_name, workdir, created_at, started_at, expires_at, ended_at, end_reason, handle, template_id, lifecycle, network, envd_key, name`

const keyColumns = `id, principal_id, name, prefix, hash, scopes, created_at, revoked_at, last_used_at`

const principalColumns = `id, kind, name, created_by, created_at`

const auditColumns = `seq, time, request_id, principal_id, action, target, outcome, detail, prev_hash, hash`

// statements are the hot-path queries, prepared once per pool. Writer
// statements are used inside transactions through tx.StmtContext, which
// reuses the preparation because the writer pool has a single connection.
type statements struct {
	// writer
	insertSandbox *sql.Stmt
	lockSandbox   *sql.Stmt
	updateSandbox *sql.Stmt
	insertMeta    *sql.Stmt
	deleteMeta    *sql.Stmt
	insertAudit   *sql.Stmt
	touchKey      *sql.Stmt

	// reader
	getSandbox   *sql.Stmt
	getKey       *sql.Stmt
	getPrincipal *sql.Stmt
	lastAudit    *sql.Stmt

	all []*sql.Stmt
}

func (st *statements) prepare(ctx context.Context, writer, reader *sql.DB) error {
	list := []struct {
		db   *sql.DB
		dst  **sql.Stmt
		text string
	}{
		{writer, &st.insertSandbox, `INSERT INTO sandboxes (` + sandboxColumns + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{writer, &st.lockSandbox, `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`},
		{writer, &st.updateSandbox, `UPDATE sandboxes SET template = ?, state = ?, owner = ?, backend = ?,
			cpu_millis = ?, memory_mb = ?, disk_mb = ?, env = ?, metadata = ?, user_name = ?, workdir = ?,
			created_at = ?, started_at = ?, expires_at = ?, ended_at = ?, end_reason = ?, handle = ?,
			template_id = ?, lifecycle = ?, network = ?, envd_key = ?, name = ? WHERE id = ?`},
		{writer, &st.insertMeta, `INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES (?, ?, ?)`},
		{writer, &st.deleteMeta, `DELETE FROM sandbox_metadata WHERE sandbox_id = ?`},
		{writer, &st.insertAudit, `INSERT INTO audit_events (` + auditColumns + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{writer, &st.touchKey, `UPDATE api_keys SET last_used_at = ?1
			WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)`},
		{reader, &st.getSandbox, `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`},
		{reader, &st.getKey, `SELECT ` + keyColumns + ` FROM api_keys WHERE id = ?`},
		{reader, &st.getPrincipal, `SELECT ` + principalColumns + ` FROM principals WHERE id = ?`},
		{reader, &st.lastAudit, `SELECT ` + auditColumns + ` FROM audit_events ORDER BY seq DESC LIMIT 1`},
	}
	for _, q := range list {
		stmt, err := q.db.PrepareContext(ctx, q.text)
		if err != nil {
			st.close()
			return fmt.Errorf("prepare %q: %w", q.text, err)
		}
		*q.dst = stmt
		st.all = append(st.all, stmt)
	}
	return nil
}

func (st *statements) close() {
	for _, s := range st.all {
		_ = s.Close()
	}
	st.all = nil
}
