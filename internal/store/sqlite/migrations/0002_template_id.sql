-- The content id of the template a sandbox booted from, so template garbage
-- collection keeps the layers of every sandbox that may still mount them.
ALTER TABLE sandboxes ADD COLUMN template_id TEXT NOT NULL DEFAULT '';
