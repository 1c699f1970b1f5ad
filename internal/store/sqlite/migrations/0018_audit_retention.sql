-- 0018: audit retention (internal/audit/retention.go). When the oldest
-- audit events are deleted, one row stands in for them: how many were
-- deleted (events 1 to size), the hash of the last one (which the first
-- retained event links to), the signed checkpoint of exactly that size,
-- and the Merkle subtree hashes that keep every older checkpoint provable
-- (JSON: "level/index" to base64). mac is the audit key's HMAC over
-- (size, hash, checkpoint_n), so editing the row is caught.
CREATE TABLE audit_anchor (
	id           INTEGER PRIMARY KEY CHECK (id = 1),
	size         INTEGER NOT NULL CHECK (size > 0),
	hash         TEXT NOT NULL,
	checkpoint_n INTEGER NOT NULL,
	nodes        TEXT NOT NULL,
	mac          TEXT NOT NULL,
	pruned_at    INTEGER NOT NULL
) STRICT;
