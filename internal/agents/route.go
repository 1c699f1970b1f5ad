package agents

import (
	"context"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// Paths of wardend's gateways (internal/llmgw.PathPrefix and
// internal/mcpgw.PathPrefix), as runs reach them under their WARDEN_URL.
const (
	llmPath = "/llm/"
	mcpPath = "/mcp/v/"
)

// usageGrace is how long after a run's end the LLM calls made with its
// key still count for it: a call settles once its answer was sent, which
// may be after the process that asked exited.
const usageGrace = time.Minute

// runNetwork is the network policy of a run's new sandbox: the spec's,
// or, when the daemon serves runs their route to it (LocalURL) and the
// spec gives no network, an allowlist with no rules: nothing but Warden's
// own gateways (network.LocalName) is reachable.
func (s *Service) runNetwork(spec Spec) *network.Policy {
	if s.cfg.LocalURL == "" || (spec.Network != nil && spec.Network.Mode != "" && spec.Network.Mode != network.ModeNone) {
		return spec.Network
	}
	return &network.Policy{Mode: network.ModeAllowlist}
}

// runEnv is what a run's process sees besides the spec's env, which wins
// over the gateways' SDK variables (OPENAI_*, ANTHROPIC_*) but not over
// Warden's own (WARDEN_*).
func (s *Service) runEnv(a store.Agent, spec Spec, r store.AgentRun, key, sandboxID string) map[string]string {
	env := map[string]string{}
	base := strings.TrimRight(s.cfg.PublicURL, "/")
	if s.cfg.LocalURL != "" {
		base = strings.TrimRight(s.cfg.LocalURL, "/")
	}
	sdk := map[string]string{}
	if p := s.cfg.OpenAIProvider; p != "" {
		sdk["OPENAI_BASE_URL"], sdk["OPENAI_API_KEY"] = base+llmPath+p+"/v1", key
	}
	if p := s.cfg.AnthropicProvider; p != "" {
		sdk["ANTHROPIC_BASE_URL"], sdk["ANTHROPIC_API_KEY"] = base+llmPath+p, key
	}
	for k, v := range sdk {
		env[k] = v
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	if len(spec.MCPServers) > 0 {
		env["WARDEN_MCP_URL"] = base + mcpPath + spec.MCPServers[0]
		env["WARDEN_MCP_SERVERS"] = strings.Join(spec.MCPServers, ",")
	}
	env["WARDEN_URL"] = base
	env["WARDEN_API_KEY"] = key
	env["WARDEN_AGENT"] = a.Name
	env["WARDEN_RUN_ID"] = r.ID
	env["WARDEN_RUN_TRIGGER"] = r.Trigger
	env["WARDEN_RUN_INPUT_FILE"] = InputPath
	env["WARDEN_SANDBOX_ID"] = sandboxID
	if len(r.Input) <= maxEnvInputBytes {
		env["WARDEN_RUN_INPUT"] = string(r.Input)
	}
	return env
}

// RunForSandbox returns the live run whose sandbox id is: the daemon
// serves Warden's gateways (network.LocalName) to those sandboxes only.
func (s *Service) RunForSandbox(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for runID, ar := range s.active {
		if id != "" && ar.sandboxID == id {
			return runID, true
		}
	}
	return "", false
}

// runOfKey is the run a key was issued for, while it lives and for
// usageGrace after its end; s.mu held.
func (s *Service) runOfKey(keyID string) (string, bool) {
	if keyID == "" {
		return "", false
	}
	for runID, ar := range s.active {
		if ar.keyID == keyID {
			return runID, true
		}
	}
	now := time.Now()
	for k, e := range s.endedKeys {
		if now.Sub(e.at) > usageGrace {
			delete(s.endedKeys, k)
		}
	}
	e, ok := s.endedKeys[keyID]
	return e.run, ok
}

type endedKey struct {
	run string
	at  time.Time
}

// AddRunUsage adds an LLM call made with key keyID to its run's tokens
// and cost (the LLM gateway calls it as each call settles). A key that
// is no run's (or whose run ended over a minute ago) is ignored.
func (s *Service) AddRunUsage(ctx context.Context, keyID string, calls, tokensIn, tokensOut, costMicros int64) {
	s.mu.Lock()
	runID, ok := s.runOfKey(keyID)
	s.mu.Unlock()
	if !ok {
		return
	}
	_, err := s.cfg.Store.UpdateAgentRun(context.WithoutCancel(ctx), runID, func(x *store.AgentRun) error {
		x.LLMCalls += calls
		x.TokensIn += tokensIn
		x.TokensOut += tokensOut
		x.CostMicros += costMicros
		return nil
	})
	if err != nil {
		s.log.Warn("agents: record a run's llm usage", "run", runID, "err", err)
	}
}
