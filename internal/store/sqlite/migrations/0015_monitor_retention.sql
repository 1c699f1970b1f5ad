-- 0015: outgoing webhooks (internal/webhook). Each endpoint delivers the
-- audit events it subscribes to in order; its cursor is the seq of the
-- last audit event handled (delivered, skipped or given up on), so that
-- deliveries resume after a restart: at least once.
CREATE TABLE webhook_cursors (
	endpoint   TEXT PRIMARY KEY,
	seq        INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
