-- 0007: governance (internal/govern). Policies are stored as opaque JSON
-- documents (rules and per-kind defaults); the engine compiles them. Every
-- version of every policy is kept in policy_versions, also after the policy
-- is deleted, so dry runs and audit events can name the version that
-- decided. Approvals are requests to let one exact action through once.

CREATE TABLE policies (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	version    INTEGER NOT NULL CHECK (version >= 1),
	scope_kind TEXT NOT NULL,
	scope_id   TEXT NOT NULL,
	document   TEXT NOT NULL, -- JSON
	created_at INTEGER NOT NULL,
	created_by TEXT NOT NULL,
	updated_at INTEGER NOT NULL,
	updated_by TEXT NOT NULL
) STRICT;

CREATE TABLE policy_versions (
	policy_id  TEXT NOT NULL,
	version    INTEGER NOT NULL,
	name       TEXT NOT NULL,
	scope_kind TEXT NOT NULL,
	scope_id   TEXT NOT NULL,
	document   TEXT NOT NULL,
	created_at INTEGER NOT NULL, -- when this version was written
	created_by TEXT NOT NULL,
	deleted_at INTEGER,          -- set on every version when the policy is deleted
	PRIMARY KEY (policy_id, version)
) STRICT, WITHOUT ROWID;

CREATE TABLE approvals (
	id             TEXT PRIMARY KEY,
	digest         TEXT NOT NULL, -- hex SHA-256 of the canonical action
	principal_id   TEXT NOT NULL, -- the requester (the actor of the action)
	owner_id       TEXT NOT NULL, -- the requester's owner ('' for none)
	kind           TEXT NOT NULL,
	target         TEXT NOT NULL,
	rule_id        TEXT NOT NULL,
	policy_id      TEXT NOT NULL,
	policy_version INTEGER NOT NULL,
	approvers      TEXT NOT NULL, -- JSON array of strings
	message        TEXT NOT NULL,
	action         TEXT NOT NULL, -- JSON: the canonical action
	state          TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'expired')),
	created_at     INTEGER NOT NULL,
	expires_at     INTEGER NOT NULL,
	decided_by     TEXT NOT NULL,
	decided_at     INTEGER,
	reason         TEXT NOT NULL,
	consumed_at    INTEGER
) STRICT;

CREATE INDEX approvals_by_digest ON approvals (digest, principal_id, created_at);
CREATE INDEX approvals_by_state ON approvals (state, created_at, id);
