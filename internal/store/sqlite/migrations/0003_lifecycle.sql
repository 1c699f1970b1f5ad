-- What happens at a sandbox's timeout and on calls while it is paused
-- (JSON: auto_pause, auto_resume, timeout_ms); '{}' is kill at timeout.
ALTER TABLE sandboxes ADD COLUMN lifecycle TEXT NOT NULL DEFAULT '{}';
