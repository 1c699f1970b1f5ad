-- 0009: the Agent Monitor's timeline (internal/monitor). Rows mirror audit
-- events (audit_seq) or record what agents report (ingest, hooks). Content
-- (prompts, responses, tool output) is redactable: a redaction empties it
-- and keeps content_sha256.

CREATE TABLE monitor_events (
	seq            INTEGER PRIMARY KEY AUTOINCREMENT,
	id             TEXT NOT NULL UNIQUE,
	time           INTEGER NOT NULL,
	kind           TEXT NOT NULL,
	source         TEXT NOT NULL,
	principal_id   TEXT NOT NULL,
	agent_id       TEXT NOT NULL,
	sandbox_id     TEXT NOT NULL,
	session_id     TEXT NOT NULL,
	action         TEXT NOT NULL,
	target         TEXT NOT NULL,
	outcome        TEXT NOT NULL,
	rule_id        TEXT NOT NULL,
	detail         TEXT NOT NULL, -- JSON, '' for none
	content        TEXT NOT NULL,
	content_sha256 TEXT NOT NULL,
	redacted_at    INTEGER,
	audit_seq      INTEGER NOT NULL
) STRICT;

CREATE INDEX monitor_events_by_agent ON monitor_events (agent_id, seq);
CREATE INDEX monitor_events_by_principal ON monitor_events (principal_id, seq);
CREATE INDEX monitor_events_by_sandbox ON monitor_events (sandbox_id, seq);
CREATE INDEX monitor_events_by_time ON monitor_events (time);
