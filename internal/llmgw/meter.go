package llmgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/store"
)

// Usage is one principal's (and agent's) use of one model on one day (UTC).
type Usage = store.LLMUsage

// UsageStore persists usage and the run-time price table and budgets
// (*sqlite.Store). With none the gateway keeps them in memory.
type UsageStore interface {
	AddLLMUsage(ctx context.Context, u store.LLMUsage) error
	SumLLMUsage(ctx context.Context, f store.LLMUsageFilter) (tokens, costMicros int64, err error)
	ListLLMUsage(ctx context.Context, f store.LLMUsageFilter) ([]store.LLMUsage, error)
	GetUsageSetting(ctx context.Context, name string) (store.UsageSetting, error)
	PutUsageSetting(ctx context.Context, s store.UsageSetting) error
	DeleteUsageSetting(ctx context.Context, name string) error
}

// The names of the run-time settings in the UsageStore.
const (
	settingPrices  = "llm.prices"
	settingBudgets = "llm.budgets"
)

// DefaultReserveTokens is the output estimate reserved for a call that
// sets no max_tokens (config llm.reserve_tokens).
const DefaultReserveTokens = 1024

var agentRE = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,64}$`)

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

// CheckPrices validates a price table.
func CheckPrices(prices []config.LLMPrice) error {
	for _, p := range prices {
		if _, err := path.Match(p.Model, ""); err != nil || p.Model == "" || p.Input < 0 || p.Output < 0 ||
			math.IsNaN(p.Input) || math.IsNaN(p.Output) || math.IsInf(p.Input, 0) || math.IsInf(p.Output, 0) {
			return fmt.Errorf("price for %q: bad pattern or negative price", p.Model)
		}
	}
	return nil
}

// CheckBudgets validates budgets.
func CheckBudgets(budgets []config.LLMBudget) error {
	seen := map[string]bool{}
	for _, b := range budgets {
		scopes := 0
		for _, set := range []bool{b.Principal != "", b.Agent != "", len(b.Group) > 0} {
			if set {
				scopes++
			}
		}
		if b.Name == "" || scopes != 1 || (b.Period != "day" && b.Period != "month") || (b.Tokens <= 0) == (b.USD <= 0) ||
			math.IsNaN(b.USD) || math.IsInf(b.USD, 0) {
			return fmt.Errorf("budget %q: needs a name, one of principal (or \"*\"), agent (or \"*\") or group, period day or month, and tokens or usd", b.Name)
		}
		if seen[b.Name] {
			return fmt.Errorf("budget %q is defined twice", b.Name)
		}
		seen[b.Name] = true
		if slices.Contains(b.Group, "") || slices.Contains(b.Group, "*") {
			return fmt.Errorf("budget %q: a group lists principal IDs", b.Name)
		}
	}
	return nil
}

// settings is the price table and budgets in force.
type settings struct {
	prices  []config.LLMPrice
	budgets []config.LLMBudget
}

// scope is what a budget counts for one call: a key for reservations and
// the filter of the stored usage.
type scope struct {
	key    string
	filter store.LLMUsageFilter
}

// scopeOf returns the budget's scope for a call by principal with agent
// label agent, and false when the budget does not apply to it.
func scopeOf(b config.LLMBudget, principal, agent string) (scope, bool) {
	switch {
	case b.Principal != "":
		if b.Principal != "*" && b.Principal != principal {
			return scope{}, false
		}
		return scope{"p\x00" + principal, store.LLMUsageFilter{Principals: []string{principal}}}, true
	case b.Agent != "":
		if agent == "" || (b.Agent != "*" && b.Agent != agent) {
			return scope{}, false
		}
		return scope{"a\x00" + agent, store.LLMUsageFilter{Agent: agent}}, true
	case len(b.Group) > 0:
		if !slices.Contains(b.Group, principal) {
			return scope{}, false
		}
		g := slices.Clone(b.Group)
		sort.Strings(g)
		return scope{"g\x00" + strings.Join(g, "\x00"), store.LLMUsageFilter{Principals: g}}, true
	}
	return scope{}, false
}

// period returns the inclusive day range of b's period at t and when it
// resets.
func period(b config.LLMBudget, t time.Time) (from, to string, reset time.Time) {
	t = t.UTC()
	if b.Period == "month" {
		first := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		reset = first.AddDate(0, 1, 0)
		return first.Format(time.DateOnly), reset.AddDate(0, 0, -1).Format(time.DateOnly), reset
	}
	day := t.Format(time.DateOnly)
	return day, day, time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
}

// spend is tokens and cost.
type spend struct{ tokens, cost int64 }

// meter records usage in the store and holds the reservations of the
// calls in flight, so that parallel calls cannot all pass a budget check
// made before any of them finished.
type meter struct {
	st UsageStore

	mu       sync.Mutex // serialises budget checks with reservations
	reserved map[string]spend
}

func newMeter(st UsageStore) *meter {
	return &meter{st: st, reserved: map[string]spend{}}
}

// reservation is what one call reserved; release gives it back.
type reservation struct {
	keys []string
	est  spend
}

// reserve checks budgets for a call and, when none is spent, reserves est
// against each budget that applies. It returns the spent budget's name and
// why, or the reservation.
func (m *meter) reserve(ctx context.Context, budgets []config.LLMBudget, principal, agent string, t time.Time, est spend) (*reservation, string, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := &reservation{est: est}
	for _, b := range budgets {
		sc, ok := scopeOf(b, principal, agent)
		if !ok {
			continue
		}
		from, to, reset := period(b, t)
		f := sc.filter
		f.FromDay, f.ToDay = from, to
		tokens, cost, err := m.st.SumLLMUsage(ctx, f)
		if err != nil {
			return nil, "", "", fmt.Errorf("budget %s: %w", b.Name, err)
		}
		key := b.Name + "\x00" + from + "\x00" + sc.key
		r := m.reserved[key]
		inflight := ""
		if r.tokens > 0 || r.cost > 0 {
			inflight = " (counting what calls in flight reserved)"
		}
		switch {
		case b.Tokens > 0 && tokens+r.tokens >= b.Tokens:
			return nil, b.Name, fmt.Sprintf("LLM budget %q is spent: %d of %d tokens per %s used%s; it resets at %s",
				b.Name, tokens+r.tokens, b.Tokens, b.Period, inflight, reset.Format(time.RFC3339)), nil
		case b.USD > 0 && float64(cost+r.cost) >= b.USD*1e6:
			return nil, b.Name, fmt.Sprintf("LLM budget %q is spent: $%.6f of $%.2f per %s used%s; it resets at %s",
				b.Name, float64(cost+r.cost)/1e6, b.USD, b.Period, inflight, reset.Format(time.RFC3339)), nil
		}
		res.keys = append(res.keys, key)
	}
	for _, k := range res.keys {
		r := m.reserved[k]
		m.reserved[k] = spend{r.tokens + est.tokens, r.cost + est.cost}
	}
	return res, "", "", nil
}

// release gives a reservation back (nil is a no-op).
func (m *meter) release(res *reservation) {
	if res == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range res.keys {
		r := m.reserved[k]
		r.tokens -= res.est.tokens
		r.cost -= res.est.cost
		if r.tokens <= 0 && r.cost <= 0 {
			delete(m.reserved, k)
		} else {
			m.reserved[k] = r
		}
	}
	res.keys = nil
}

// memUsage is the in-memory UsageStore used when the gateway has none.
type memUsage struct {
	mu       sync.Mutex
	rows     map[[6]string]*store.LLMUsage
	settings map[string]store.UsageSetting
}

func newMemUsage() *memUsage {
	return &memUsage{rows: map[[6]string]*store.LLMUsage{}, settings: map[string]store.UsageSetting{}}
}

func (m *memUsage) AddLLMUsage(_ context.Context, u store.LLMUsage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [6]string{u.PrincipalID, u.Agent, u.Day, u.Provider, u.Model, u.SandboxID}
	r := m.rows[k]
	if r == nil {
		r = &store.LLMUsage{PrincipalID: u.PrincipalID, Agent: u.Agent, Day: u.Day, Provider: u.Provider, Model: u.Model, SandboxID: u.SandboxID}
		m.rows[k] = r
	}
	r.Calls += u.Calls
	r.TokensIn += u.TokensIn
	r.TokensOut += u.TokensOut
	r.CostMicros += u.CostMicros
	return nil
}

func match(f store.LLMUsageFilter, u *store.LLMUsage) bool {
	return (len(f.Principals) == 0 || slices.Contains(f.Principals, u.PrincipalID)) &&
		(f.Agent == "" || f.Agent == u.Agent) && (f.Sandbox == "" || f.Sandbox == u.SandboxID) &&
		(f.FromDay == "" || u.Day >= f.FromDay) && (f.ToDay == "" || u.Day <= f.ToDay)
}

func (m *memUsage) SumLLMUsage(_ context.Context, f store.LLMUsageFilter) (int64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var t, c int64
	for _, u := range m.rows {
		if match(f, u) {
			t += u.TokensIn + u.TokensOut
			c += u.CostMicros
		}
	}
	return t, c, nil
}

func (m *memUsage) ListLLMUsage(_ context.Context, f store.LLMUsageFilter) ([]store.LLMUsage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.LLMUsage
	for _, u := range m.rows {
		if match(f, u) {
			out = append(out, *u)
		}
	}
	key := func(u store.LLMUsage) string {
		return strings.Join([]string{u.Day, u.PrincipalID, u.Agent, u.Provider, u.Model, u.SandboxID}, "\x00")
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out, nil
}

func (m *memUsage) GetUsageSetting(_ context.Context, name string) (store.UsageSetting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.settings[name]
	if !ok {
		return store.UsageSetting{}, store.ErrNotFound
	}
	return s, nil
}

func (m *memUsage) PutUsageSetting(_ context.Context, s store.UsageSetting) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settings[s.Name] = s
	return nil
}

func (m *memUsage) DeleteUsageSetting(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.settings[name]; !ok {
		return store.ErrNotFound
	}
	delete(m.settings, name)
	return nil
}

// loadSetting decodes a stored setting into v; ok is false when none is
// stored.
func loadSetting(ctx context.Context, st UsageStore, name string, v any) (bool, error) {
	s, err := st.GetUsageSetting(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(s.Value, v); err != nil {
		return false, fmt.Errorf("stored %s: %w", name, err)
	}
	return true, nil
}
