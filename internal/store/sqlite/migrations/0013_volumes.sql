-- 0013: volumes (internal/volume). A volume is a named ext4 image owned by
-- a principal; an attachment records which sandbox mounts it, where and
-- how. An attachment counts while its sandbox is not in a terminal state
-- (stopped, failed, lost), so a daemon that died before detaching does not
-- keep a volume busy forever.

CREATE TABLE volumes (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	owner      TEXT NOT NULL,
	size_bytes INTEGER NOT NULL CHECK (size_bytes > 0),
	created_at INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX volumes_by_owner_name ON volumes (owner, name);

CREATE TABLE volume_attachments (
	volume_id  TEXT NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	path       TEXT NOT NULL,
	read_only  INTEGER NOT NULL CHECK (read_only IN (0, 1)),
	created_at INTEGER NOT NULL,
	PRIMARY KEY (volume_id, sandbox_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX volume_attachments_by_sandbox ON volume_attachments (sandbox_id);
