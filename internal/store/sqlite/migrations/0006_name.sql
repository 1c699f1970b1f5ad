-- An optional name chosen by the sandbox's owner ('' is none). A name is
-- unique per owner among live sandboxes (those not stopped, failed or
-- lost): the manager checks it before creating, and this partial index is
-- the guard against two creates racing for one name.
ALTER TABLE sandboxes ADD COLUMN name TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (owner, name)
	WHERE name <> '' AND state NOT IN ('stopped', 'failed', 'lost');
-- Name lookups across owners (an admin resolving a name).
CREATE INDEX sandboxes_by_name ON sandboxes (name) WHERE name <> '';
