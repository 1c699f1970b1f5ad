-- 0019: outgoing webhook endpoints made through the API (internal/webhook,
-- docs/webhooks.md), next to those of the config file, and each
-- endpoint's delivery state kept with its cursor, where the deliverer
-- writes it in the same statement as the cursor.
CREATE TABLE webhook_endpoints (
	name         TEXT PRIMARY KEY,
	url          TEXT NOT NULL,
	secret_id    TEXT NOT NULL,
	events       TEXT NOT NULL,   -- JSON array of globs
	outcomes     TEXT NOT NULL,   -- JSON array (empty: all)
	max_attempts INTEGER NOT NULL,
	enabled      INTEGER NOT NULL,
	created_by   TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL
);
ALTER TABLE webhook_cursors ADD COLUMN last_attempt_at INTEGER;
ALTER TABLE webhook_cursors ADD COLUMN last_status INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_cursors ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_cursors ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_cursors ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_cursors ADD COLUMN given_up INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_cursors ADD COLUMN last_delivered_at INTEGER;
