-- 0022: volume snapshots (internal/volume). A snapshot is a point-in-time
-- copy of a volume's image, named uniquely per volume and owned by the
-- volume's owner; deleting the volume deletes its snapshots (their image
-- files go with them, internal/volume).

CREATE TABLE volume_snapshots (
	id           TEXT PRIMARY KEY,
	volume_id    TEXT NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
	owner        TEXT NOT NULL,
	name         TEXT NOT NULL,
	size_bytes   INTEGER NOT NULL CHECK (size_bytes > 0),
	stored_bytes INTEGER NOT NULL CHECK (stored_bytes >= 0),
	created_at   INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX volume_snapshots_by_volume_name ON volume_snapshots (volume_id, owner, name);
