-- 0011: hosted agents (internal/agents). An agent's definition is an
-- opaque JSON spec that internal/agents validates; every change makes a
-- new version, kept in agent_versions, and each run records the version it
-- ran. Runs are rows from queued to a terminal state; their logs are files
-- under the state directory (agents/runs/<id>.log).

CREATE TABLE agents (
	id             TEXT PRIMARY KEY,
	name           TEXT NOT NULL UNIQUE,
	principal_id   TEXT NOT NULL REFERENCES principals (id),
	owner_id       TEXT NOT NULL,
	version        INTEGER NOT NULL,
	spec           TEXT NOT NULL, -- JSON of the current version
	webhook_secret TEXT NOT NULL,
	sandbox_id     TEXT NOT NULL, -- the persistent sandbox, '' for none
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
) STRICT;

CREATE TABLE agent_versions (
	agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	version    INTEGER NOT NULL,
	spec       TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	created_by TEXT NOT NULL,
	PRIMARY KEY (agent_id, version)
) STRICT, WITHOUT ROWID;

CREATE TABLE agent_runs (
	id         TEXT PRIMARY KEY,
	agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	version    INTEGER NOT NULL,
	trigger    TEXT NOT NULL,
	input      TEXT NOT NULL, -- JSON
	state      TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled')),
	reason     TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	key_id     TEXT NOT NULL, -- the run's API key, revoked when it ends
	exit_code  INTEGER,
	created_by TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	started_at INTEGER,
	ended_at   INTEGER
) STRICT;

CREATE INDEX agent_runs_by_agent ON agent_runs (agent_id, created_at);
CREATE INDEX agent_runs_by_state ON agent_runs (state, created_at);
