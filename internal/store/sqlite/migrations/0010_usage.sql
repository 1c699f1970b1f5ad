-- 0010: LLM usage and cost (internal/llmgw), its run-time settings, and
-- signed audit checkpoints (internal/audit).

-- LLM use per (principal, agent, UTC day, provider, model); calls add to
-- their row. agent is '' for calls that name none.
CREATE TABLE llm_usage (
	principal_id TEXT NOT NULL,
	agent        TEXT NOT NULL,
	day          TEXT NOT NULL, -- YYYY-MM-DD (UTC)
	provider     TEXT NOT NULL,
	model        TEXT NOT NULL,
	calls        INTEGER NOT NULL,
	tokens_in    INTEGER NOT NULL,
	tokens_out   INTEGER NOT NULL,
	cost_micros  INTEGER NOT NULL,
	PRIMARY KEY (principal_id, agent, day, provider, model)
) STRICT;
CREATE INDEX llm_usage_day ON llm_usage (day);

-- Settings edited at run time (the LLM price table and budgets), as JSON
-- documents that replace the config file's values while present.
CREATE TABLE usage_settings (
	name       TEXT PRIMARY KEY,
	value      TEXT NOT NULL, -- JSON
	updated_at INTEGER NOT NULL,
	updated_by TEXT NOT NULL
) STRICT;

-- Signed checkpoints of the audit log (Merkle tree heads), numbered from 1.
CREATE TABLE audit_checkpoints (
	n          INTEGER PRIMARY KEY,
	size       INTEGER NOT NULL,
	root       TEXT NOT NULL, -- base64 tree hash
	note       TEXT NOT NULL, -- the signed note
	created_at INTEGER NOT NULL
) STRICT;
