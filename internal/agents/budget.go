package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/store"
)

// LLMBudget caps what all of an agent's runs spend on the LLM gateway in
// a period: Tokens (input plus output) or USD (at the gateway's prices),
// or both. The gateway enforces it like a budget of its own scoped to the
// agent (config llm.budgets with agent: NAME), named "agent:NAME" (and
// "agent:NAME:usd" for the cost cap when both are set).
type LLMBudget struct {
	// Period is day (default) or month, UTC.
	Period string  `json:"period,omitempty"`
	Tokens int64   `json:"tokens,omitempty"`
	USD    float64 `json:"usd,omitempty"`
	// Ref is the older form of llm_budget, a string naming a budget of
	// the gateway's: recorded, not enforced per agent.
	Ref string `json:"-"`
}

// UnmarshalJSON reads an object or, for specs written before budgets were
// enforced per agent, a string.
func (b *LLMBudget) UnmarshalJSON(data []byte) error {
	if d := bytes.TrimSpace(data); len(d) > 0 && d[0] == '"' {
		*b = LLMBudget{}
		return json.Unmarshal(d, &b.Ref)
	}
	type plain LLMBudget
	var p plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("llm_budget: %w", err)
	}
	*b = LLMBudget(p)
	return nil
}

// MarshalJSON writes the string form back for a Ref.
func (b LLMBudget) MarshalJSON() ([]byte, error) {
	if b.Ref != "" && b.Tokens == 0 && b.USD == 0 && b.Period == "" {
		return json.Marshal(b.Ref)
	}
	type plain LLMBudget
	return json.Marshal(plain(b))
}

func (b *LLMBudget) validate() error {
	if b == nil || (b.Ref != "" && b.Tokens == 0 && b.USD == 0 && b.Period == "") {
		return nil
	}
	switch b.Period {
	case "":
		b.Period = "day"
	case "day", "month":
	default:
		return fmt.Errorf("period %q: want day or month", b.Period)
	}
	if b.Tokens < 0 || b.USD < 0 || math.IsNaN(b.USD) || math.IsInf(b.USD, 0) {
		return errors.New("tokens and usd must not be negative")
	}
	if b.Tokens == 0 && b.USD == 0 {
		return errors.New("set tokens, usd or both")
	}
	return nil
}

// gatewayBudgets are b's budgets for agent name in the LLM gateway's terms.
func (b *LLMBudget) gatewayBudgets(name string) []config.LLMBudget {
	if b == nil || (b.Tokens == 0 && b.USD == 0) {
		return nil
	}
	var out []config.LLMBudget
	if b.Tokens > 0 {
		out = append(out, config.LLMBudget{Name: "agent:" + name, Agent: name, Period: b.Period, Tokens: b.Tokens})
	}
	if b.USD > 0 {
		n := "agent:" + name
		if b.Tokens > 0 {
			n += ":usd"
		}
		out = append(out, config.LLMBudget{Name: n, Agent: name, Period: b.Period, USD: b.USD})
	}
	return out
}

// LLMBudgets returns the budgets the current version of the agent with
// this agent label (its name: the gateway labels a hosted agent's calls
// with its principal's name) sets, for the LLM gateway; none for a label
// that is no hosted agent.
func (s *Service) LLMBudgets(ctx context.Context, agent string) ([]config.LLMBudget, error) {
	if agent == "" {
		return nil, nil
	}
	a, err := s.cfg.Store.GetAgentByName(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s: llm budget: %w", agent, err)
	}
	spec, err := ParseSpec(a.Spec)
	if err != nil {
		return nil, fmt.Errorf("agent %s: llm budget: %w", agent, err)
	}
	return spec.LLMBudget.gatewayBudgets(a.Name), nil
}
