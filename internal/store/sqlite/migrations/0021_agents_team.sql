-- 0021: team memories of hosted agents (docs/memory.md). A team is a
-- memory namespace ("team.NAME") shared by the agents whose spec names
-- it; it is owned by the owner of the first agent that named it, and
-- only that owner's agents (or an admin's) may join it. The row outlives
-- the agents, like the memory itself.
CREATE TABLE memory_teams (
	name       TEXT PRIMARY KEY,
	owner_id   TEXT NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
