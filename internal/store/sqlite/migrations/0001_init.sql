-- 0001: initial schema. Times are INTEGER unix nanoseconds (UTC); NULL means unset.

CREATE TABLE principals (
	id         TEXT PRIMARY KEY,
	kind       TEXT NOT NULL CHECK (kind IN ('user', 'agent')),
	name       TEXT NOT NULL,
	created_by TEXT REFERENCES principals (id),
	created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	principal_id TEXT NOT NULL REFERENCES principals (id),
	name         TEXT NOT NULL,
	prefix       TEXT NOT NULL,
	hash         TEXT NOT NULL,
	scopes       TEXT NOT NULL, -- JSON array of strings
	created_at   INTEGER NOT NULL,
	revoked_at   INTEGER,
	last_used_at INTEGER
) STRICT;

CREATE INDEX api_keys_by_principal ON api_keys (principal_id, created_at);

CREATE TABLE sandboxes (
	id         TEXT PRIMARY KEY,
	template   TEXT NOT NULL,
	state      TEXT NOT NULL,
	owner      TEXT NOT NULL REFERENCES principals (id),
	backend    TEXT NOT NULL,
	cpu_millis INTEGER NOT NULL,
	memory_mb  INTEGER NOT NULL,
	disk_mb    INTEGER NOT NULL,
	env        TEXT NOT NULL, -- JSON object; never returned by the API
	metadata   TEXT NOT NULL, -- JSON object; sandbox_metadata is its index
	user_name  TEXT NOT NULL,
	workdir    TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	started_at INTEGER,
	expires_at INTEGER,
	ended_at   INTEGER,
	end_reason TEXT NOT NULL,
	handle     BLOB -- backend handle, JSON
) STRICT;

-- ListSandboxes orders by (created_at DESC, id DESC) and pages with a
-- row-value comparison on the same pair.
CREATE INDEX sandboxes_by_created ON sandboxes (created_at, id);
CREATE INDEX sandboxes_by_owner ON sandboxes (owner, created_at, id);
CREATE INDEX sandboxes_by_state ON sandboxes (state, created_at, id);

-- One row per metadata pair, so metadata filters use an index.
CREATE TABLE sandbox_metadata (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	key        TEXT NOT NULL,
	value      TEXT NOT NULL,
	PRIMARY KEY (sandbox_id, key)
) STRICT, WITHOUT ROWID;

CREATE INDEX sandbox_metadata_by_pair ON sandbox_metadata (key, value);

CREATE TABLE audit_events (
	seq          INTEGER PRIMARY KEY,
	time         INTEGER NOT NULL,
	request_id   TEXT NOT NULL,
	principal_id TEXT NOT NULL, -- no foreign key: the log outlives principals and records unknown callers
	action       TEXT NOT NULL,
	target       TEXT NOT NULL,
	outcome      TEXT NOT NULL,
	detail       TEXT NOT NULL, -- JSON, stored byte for byte (it is hashed)
	prev_hash    TEXT NOT NULL,
	hash         TEXT NOT NULL
) STRICT;

CREATE INDEX audit_events_by_target ON audit_events (target, seq);
CREATE INDEX audit_events_by_principal ON audit_events (principal_id, seq);
