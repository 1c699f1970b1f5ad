-- The API key a sandbox's E2B envd access token is bound to ('' until one
-- is): the token stops working when that key is revoked.
ALTER TABLE sandboxes ADD COLUMN envd_key TEXT NOT NULL DEFAULT '';
