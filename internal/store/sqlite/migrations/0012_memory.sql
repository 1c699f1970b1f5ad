-- 0012: agent memory (internal/memory). Every write of a key is a new
-- row (version), attributed to the principal, agent and run that wrote it;
-- forgetting writes a tombstone version. Redaction empties the text (and
-- its digest) of versions in place and records who did it and why.
-- memory_fts indexes the live (latest, not forgotten, not redacted)
-- version of each key for recall; the store keeps it in step.

CREATE TABLE memory_versions (
	namespace     TEXT NOT NULL,
	key           TEXT NOT NULL,
	version       INTEGER NOT NULL,
	text          TEXT NOT NULL,
	tags          TEXT NOT NULL, -- JSON array
	sha256        TEXT NOT NULL, -- hex digest of text ('' when forgotten or redacted)
	forgotten     INTEGER NOT NULL DEFAULT 0,
	principal_id  TEXT NOT NULL,
	agent         TEXT NOT NULL,
	run_id        TEXT NOT NULL,
	created_at    INTEGER NOT NULL,
	redacted_at   INTEGER,
	redacted_by   TEXT NOT NULL DEFAULT '',
	redact_reason TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (namespace, key, version)
) STRICT;

CREATE VIRTUAL TABLE memory_fts USING fts5(namespace UNINDEXED, key, text, tags);
