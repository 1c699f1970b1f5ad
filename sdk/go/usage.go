package warden

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// LLMPrice is a model's price in dollars per million tokens.
type LLMPrice struct {
	// Model is a model name or pattern ("gpt-4o*").
	Model  string  `json:"model"`
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// LLMPrices is the LLM gateway's price table; Source is "config" or "api".
type LLMPrices struct {
	Prices []LLMPrice `json:"prices"`
	Source string     `json:"source,omitempty"`
}

// LLMBudget caps LLM use per day or month. Exactly one of Principal (an ID
// or "*"), Agent (a label or "*") and Group (principal IDs counted
// together) is set, and one of Tokens and USD.
type LLMBudget struct {
	Name      string   `json:"name"`
	Principal string   `json:"principal,omitempty"`
	Agent     string   `json:"agent,omitempty"`
	Group     []string `json:"group,omitempty"`
	Period    string   `json:"period"` // day or month
	Tokens    int64    `json:"tokens,omitempty"`
	USD       float64  `json:"usd,omitempty"`
}

// LLMBudgets is the LLM gateway's budgets; Source is "config" or "api".
type LLMBudgets struct {
	Budgets []LLMBudget `json:"budgets"`
	Source  string      `json:"source,omitempty"`
}

// UsageQuery selects and groups [Client.LLMUsage].
type UsageQuery struct {
	// GroupBy is principal (default), agent, sandbox, model or day.
	GroupBy string
	// Since and Until are RFC 3339, a date or a duration back from now
	// ("24h", "7d"); empty: 30 days ago and now.
	Since, Until string
	Principal    string
	Agent        string
	// Sandbox limits the report to one sandbox's use: its resources and
	// the LLM calls made from it.
	Sandbox string
}

// UsageRow is one group of a [UsageReport]: LLM calls, tokens and cost,
// and sandbox resources.
type UsageRow struct {
	Key        string  `json:"key"`
	Calls      int64   `json:"llm_calls"`
	TokensIn   int64   `json:"llm_tokens_in"`
	TokensOut  int64   `json:"llm_tokens_out"`
	CostMicros int64   `json:"llm_cost_micros"`
	CostUSD    float64 `json:"llm_cost_usd"`

	// Sandboxes is how many sandboxes the figures below cover.
	Sandboxes        int64   `json:"sandboxes"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	EgressBytesOut   int64   `json:"egress_bytes_out"`
	EgressBytesIn    int64   `json:"egress_bytes_in"`
	RunningSeconds   float64 `json:"running_seconds"`
	PausedSeconds    float64 `json:"paused_seconds"`
	// DiskBytes sums the most disk each sandbox held in the range.
	DiskBytes int64 `json:"disk_bytes"`
	// Volumes and VolumeBytes are the principal's persistent volumes and the bytes their
	// filesystems use now, not over the range (group_by principal only; 0 otherwise).
	Volumes     int64 `json:"volumes"`
	VolumeBytes int64 `json:"volume_bytes"`
}

// UsageReport is usage and cost by group: LLM figures over a range of UTC
// days, sandbox figures over the UTC hours from From to To.
type UsageReport struct {
	GroupBy string     `json:"group_by"`
	FromDay string     `json:"from_day"`
	ToDay   string     `json:"to_day"`
	From    time.Time  `json:"from"`
	To      time.Time  `json:"to"`
	Rows    []UsageRow `json:"rows"`
}

func (q UsageQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"group_by": q.GroupBy, "since": q.Since, "until": q.Until, "principal": q.Principal,
		"agent": q.Agent, "sandbox": q.Sandbox} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// LLMUsage reports usage and cost: LLM calls and sandbox resources (admin).
func (c *Client) LLMUsage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	var r UsageReport
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/usage", query: q.values(), idempotent: true}, &r); err != nil {
		return UsageReport{}, fmt.Errorf("get usage: %w", err)
	}
	return r, nil
}

// LLMUsageCSV reports the same as [Client.LLMUsage] as CSV with a header row.
func (c *Client) LLMUsageCSV(ctx context.Context, q UsageQuery) ([]byte, error) {
	v := q.values()
	v.Set("format", "csv")
	resp, err := c.send(ctx, &request{method: http.MethodGet, path: "/v1/usage", query: v, idempotent: true, accept: "text/csv"})
	if err != nil {
		return nil, fmt.Errorf("get usage: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("get usage: %w", err)
	}
	return b, nil
}

// LLMPrices returns the LLM price table in force (admin).
func (c *Client) LLMPrices(ctx context.Context) (LLMPrices, error) {
	var r LLMPrices
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/llm/prices", idempotent: true}, &r); err != nil {
		return LLMPrices{}, fmt.Errorf("get llm prices: %w", err)
	}
	return r, nil
}

// SetLLMPrices replaces the price table at run time; nil goes back to the
// config file's.
func (c *Client) SetLLMPrices(ctx context.Context, prices []LLMPrice) (LLMPrices, error) {
	rq := &request{method: http.MethodPut, path: "/v1/llm/prices", json: LLMPrices{Prices: prices}, idempotent: true}
	if prices == nil {
		rq = &request{method: http.MethodDelete, path: "/v1/llm/prices", idempotent: true}
	}
	var r LLMPrices
	if err := c.do(ctx, rq, &r); err != nil {
		return LLMPrices{}, fmt.Errorf("set llm prices: %w", err)
	}
	return r, nil
}

// LLMBudgets returns the LLM budgets in force (admin).
func (c *Client) LLMBudgets(ctx context.Context) (LLMBudgets, error) {
	var r LLMBudgets
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/llm/budgets", idempotent: true}, &r); err != nil {
		return LLMBudgets{}, fmt.Errorf("get llm budgets: %w", err)
	}
	return r, nil
}

// SetLLMBudgets replaces the budgets at run time; nil goes back to the
// config file's.
func (c *Client) SetLLMBudgets(ctx context.Context, budgets []LLMBudget) (LLMBudgets, error) {
	rq := &request{method: http.MethodPut, path: "/v1/llm/budgets", json: LLMBudgets{Budgets: budgets}, idempotent: true}
	if budgets == nil {
		rq = &request{method: http.MethodDelete, path: "/v1/llm/budgets", idempotent: true}
	}
	var r LLMBudgets
	if err := c.do(ctx, rq, &r); err != nil {
		return LLMBudgets{}, fmt.Errorf("set llm budgets: %w", err)
	}
	return r, nil
}
