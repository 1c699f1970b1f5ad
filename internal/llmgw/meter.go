package llmgw

import (
	"fmt"
	"math"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
)

// Usage is one principal's use of one model on one day (UTC).
type Usage struct {
	Principal  string `json:"principal"`
	Day        string `json:"day"` // YYYY-MM-DD
	Model      string `json:"model"`
	Calls      int64  `json:"calls"`
	TokensIn   int64  `json:"tokens_in"`
	TokensOut  int64  `json:"tokens_out"`
	CostMicros int64  `json:"cost_micros"` // micro-dollars
}

type usageKey struct{ principal, day, model string }

// meter keeps the usage table in memory (it is lost on restart; see
// docs/llm.md).
type meter struct {
	mu   sync.Mutex
	rows map[usageKey]*Usage
}

func newMeter() *meter { return &meter{rows: map[usageKey]*Usage{}} }

func (m *meter) add(principal, model string, t time.Time, in, out, cost int64) {
	k := usageKey{principal, t.UTC().Format(time.DateOnly), model}
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.rows[k]
	if u == nil {
		u = &Usage{Principal: principal, Day: k.day, Model: model}
		m.rows[k] = u
	}
	u.Calls++
	u.TokensIn += in
	u.TokensOut += out
	u.CostMicros += cost
}

// sum returns a principal's tokens and cost on the days whose date starts
// with prefix ("2026-12-01" for a day, "2026-12" for a month).
func (m *meter) sum(principal, prefix string) (tokens, cost int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, u := range m.rows {
		if k.principal == principal && strings.HasPrefix(k.day, prefix) {
			tokens += u.TokensIn + u.TokensOut
			cost += u.CostMicros
		}
	}
	return tokens, cost
}

func (m *meter) list() []Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Usage, 0, len(m.rows))
	for _, u := range m.rows {
		out = append(out, *u)
	}
	return out
}

// price is a model's price in micro-dollars per token (dollars per
// million tokens).
type price struct{ in, out float64 }

func priceFor(prices []config.LLMPrice, model string) (price, bool) {
	for _, p := range prices {
		if ok, _ := path.Match(p.Model, model); ok || p.Model == model {
			return price{p.Input, p.Output}, true
		}
	}
	return price{}, false
}

func (p price) cost(in, out int64) int64 {
	return int64(math.Round(float64(in)*p.in + float64(out)*p.out))
}

// overBudget returns the first budget of principal that is spent at t, and
// why, or "" when none is.
func (m *meter) overBudget(budgets []config.LLMBudget, principal string, t time.Time) (string, string) {
	t = t.UTC()
	for _, b := range budgets {
		if b.Principal != "*" && b.Principal != principal {
			continue
		}
		prefix, reset := t.Format(time.DateOnly), time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		if b.Period == "month" {
			prefix, reset = t.Format("2006-01"), time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		}
		tokens, cost := m.sum(principal, prefix)
		switch {
		case b.Tokens > 0 && tokens >= b.Tokens:
			return b.Name, fmt.Sprintf("LLM budget %q is spent: %d of %d tokens per %s used; it resets at %s",
				b.Name, tokens, b.Tokens, b.Period, reset.Format(time.RFC3339))
		case b.USD > 0 && float64(cost) >= b.USD*1e6:
			return b.Name, fmt.Sprintf("LLM budget %q is spent: $%.6f of $%.2f per %s used; it resets at %s",
				b.Name, float64(cost)/1e6, b.USD, b.Period, reset.Format(time.RFC3339))
		}
	}
	return "", ""
}
