-- The sandbox's network policy (JSON, internal/network.Policy; '' is none),
-- kept so a restarted daemon can re-attach the network with it.
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';
