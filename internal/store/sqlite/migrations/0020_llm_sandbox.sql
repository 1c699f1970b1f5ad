-- 0020: LLM usage attributed to sandboxes (docs/llm.md). llm_usage gains
-- sandbox_id in its key: '' for calls made from no sandbox (the gateway
-- called from outside), else the sandbox a call came from (the
-- warden.internal route, or a provider's traffic through the egress
-- broker). SQLite cannot change a primary key in place: the table is
-- rebuilt with its rows (all of them sandbox '').
CREATE TABLE llm_usage_0020 (
	principal_id TEXT NOT NULL,
	agent        TEXT NOT NULL,
	day          TEXT NOT NULL, -- YYYY-MM-DD (UTC)
	provider     TEXT NOT NULL,
	model        TEXT NOT NULL,
	sandbox_id   TEXT NOT NULL DEFAULT '',
	calls        INTEGER NOT NULL,
	tokens_in    INTEGER NOT NULL,
	tokens_out   INTEGER NOT NULL,
	cost_micros  INTEGER NOT NULL,
	PRIMARY KEY (principal_id, agent, day, provider, model, sandbox_id)
) STRICT;
INSERT INTO llm_usage_0020 (principal_id, agent, day, provider, model, sandbox_id, calls, tokens_in, tokens_out, cost_micros)
	SELECT principal_id, agent, day, provider, model, '', calls, tokens_in, tokens_out, cost_micros FROM llm_usage;
DROP TABLE llm_usage;
ALTER TABLE llm_usage_0020 RENAME TO llm_usage;
CREATE INDEX llm_usage_day ON llm_usage (day);
CREATE INDEX llm_usage_sandbox ON llm_usage (sandbox_id) WHERE sandbox_id != '';
