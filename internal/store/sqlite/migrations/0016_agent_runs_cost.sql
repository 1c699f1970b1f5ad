-- 0016: what each hosted-agent run spent on the LLM gateway (calls made
-- with the run's own key), kept on the run.
ALTER TABLE agent_runs ADD COLUMN llm_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_runs ADD COLUMN tokens_in INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_runs ADD COLUMN tokens_out INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_runs ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0;

-- The next fire time of each cron trigger of an agent (by its index in the
-- spec), kept so that a restarted daemon knows what it missed. schedule is
-- the trigger's schedule and time zone: a different one starts afresh.
CREATE TABLE agent_cron (
	agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	idx      INTEGER NOT NULL,
	schedule TEXT NOT NULL,
	next_at  INTEGER NOT NULL,
	PRIMARY KEY (agent_id, idx)
) STRICT;
