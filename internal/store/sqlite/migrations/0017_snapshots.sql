-- 0017: filesystem snapshots (internal/snapshot). A snapshot is a named
-- capture of a sandbox's files, owned by a principal; its files are a
-- template version (template_id, a manifest id in the template store).
-- sandbox_id is not a foreign key: a snapshot outlives its sandbox's record.

CREATE TABLE snapshots (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL,
	owner       TEXT NOT NULL,
	sandbox_id  TEXT NOT NULL,
	template    TEXT NOT NULL,
	template_id TEXT NOT NULL,
	size_bytes  INTEGER NOT NULL CHECK (size_bytes >= 0),
	created_at  INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX snapshots_by_owner_name ON snapshots (owner, name);
CREATE INDEX snapshots_by_template_id ON snapshots (template_id);
