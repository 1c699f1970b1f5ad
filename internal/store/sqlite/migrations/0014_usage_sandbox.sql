-- 0014: sandbox usage from cgroups and egress counters (internal/usage).

-- What each sandbox used in one UTC hour: CPU, memory over time, egress,
-- time by state, the most disk seen. The meter adds every sample's deltas
-- to the rows of the hours it spans; rows stay after the sandbox ends.
CREATE TABLE sandbox_usage (
	sandbox_id          TEXT NOT NULL,
	hour                INTEGER NOT NULL, -- unix seconds of the UTC hour's start
	principal_id        TEXT NOT NULL,
	agent               TEXT NOT NULL,   -- the owner's agent name, '' for a user
	template            TEXT NOT NULL,
	cpu_nanos           INTEGER NOT NULL,
	memory_byte_seconds INTEGER NOT NULL,
	egress_bytes_out    INTEGER NOT NULL,
	egress_bytes_in     INTEGER NOT NULL,
	running_millis      INTEGER NOT NULL,
	paused_millis       INTEGER NOT NULL,
	disk_bytes          INTEGER NOT NULL, -- the most seen in the hour
	PRIMARY KEY (sandbox_id, hour)
) STRICT;
CREATE INDEX sandbox_usage_hour ON sandbox_usage (hour);

-- The meter's last reading of each live sandbox, so that a restarted
-- daemon goes on from it (a sandbox's cgroup counters keep counting while
-- the daemon is down). Deleted with the sandbox's final reading.
CREATE TABLE sandbox_usage_meter (
	sandbox_id       TEXT PRIMARY KEY,
	principal_id     TEXT NOT NULL,
	agent            TEXT NOT NULL,
	template         TEXT NOT NULL,
	state            TEXT NOT NULL,
	at               INTEGER NOT NULL, -- unix nanoseconds
	cpu_nanos        INTEGER NOT NULL,
	memory_bytes     INTEGER NOT NULL,
	egress_bytes_out INTEGER NOT NULL,
	egress_bytes_in  INTEGER NOT NULL
) STRICT;
