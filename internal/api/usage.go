package api

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

// LLMAdmin is the LLM gateway's run-time price table, budgets and usage
// (*llmgw.Gateway, docs/llm.md). Nil in Config: those routes answer 503.
type LLMAdmin interface {
	Prices() ([]config.LLMPrice, string)
	Budgets() ([]config.LLMBudget, string)
	// SetPrices and SetBudgets replace the lists, persisted; nil goes
	// back to the config file's.
	SetPrices(ctx context.Context, prices []config.LLMPrice, by string) error
	SetBudgets(ctx context.Context, budgets []config.LLMBudget, by string) error
	ListUsage(ctx context.Context, f store.LLMUsageFilter) ([]store.LLMUsage, error)
}

const nkUsage = "LLM price table, budgets and usage: administration and reads, admin scope"

func (s *Server) llmAdmin() (LLMAdmin, error) {
	if s.cfg.LLM == nil {
		return nil, apierr.Unavailable("the LLM gateway is not running", nil)
	}
	return s.cfg.LLM, nil
}

type llmPricesBody struct {
	Prices []config.LLMPrice `json:"prices"`
	Source string            `json:"source,omitempty"`
}

type llmBudgetsBody struct {
	Budgets []config.LLMBudget `json:"budgets"`
	Source  string             `json:"source,omitempty"`
}

func (s *Server) getLLMPrices(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	p, src := l.Prices()
	if p == nil {
		p = []config.LLMPrice{}
	}
	return writeJSON(w, http.StatusOK, llmPricesBody{Prices: p, Source: src})
}

func (s *Server) putLLMPrices(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	var q llmPricesBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Prices == nil {
		return apierr.BadRequest("prices is required (an empty list means no prices; DELETE goes back to the config file's)")
	}
	stateOf(r).detail["prices"] = len(q.Prices)
	if err := l.SetPrices(r.Context(), q.Prices, stateOf(r).principal); err != nil {
		return usageErr(err)
	}
	return s.getLLMPrices(w, r)
}

func (s *Server) deleteLLMPrices(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	if err := l.SetPrices(r.Context(), nil, stateOf(r).principal); err != nil {
		return usageErr(err)
	}
	return s.getLLMPrices(w, r)
}

func (s *Server) getLLMBudgets(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	b, src := l.Budgets()
	if b == nil {
		b = []config.LLMBudget{}
	}
	return writeJSON(w, http.StatusOK, llmBudgetsBody{Budgets: b, Source: src})
}

func (s *Server) putLLMBudgets(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	var q llmBudgetsBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Budgets == nil {
		return apierr.BadRequest("budgets is required (an empty list means no budgets; DELETE goes back to the config file's)")
	}
	stateOf(r).detail["budgets"] = len(q.Budgets)
	if err := l.SetBudgets(r.Context(), q.Budgets, stateOf(r).principal); err != nil {
		return usageErr(err)
	}
	return s.getLLMBudgets(w, r)
}

func (s *Server) deleteLLMBudgets(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	if err := l.SetBudgets(r.Context(), nil, stateOf(r).principal); err != nil {
		return usageErr(err)
	}
	return s.getLLMBudgets(w, r)
}

func usageErr(err error) error {
	if k, msg := errkind.Of(err); k == errkind.Invalid {
		return apierr.BadRequest("%s", msg)
	}
	return err
}

// usageRow is one group of GET /v1/usage.
type usageRow struct {
	Key        string  `json:"key"`
	Calls      int64   `json:"llm_calls"`
	TokensIn   int64   `json:"llm_tokens_in"`
	TokensOut  int64   `json:"llm_tokens_out"`
	CostMicros int64   `json:"llm_cost_micros"`
	CostUSD    float64 `json:"llm_cost_usd"`
}

// usageTime reads since/until: RFC 3339, a date (YYYY-MM-DD) or a
// duration back from now ("24h", "7d").
func usageTime(r *http.Request, name string, now time.Time, def time.Time) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if d, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 && n <= 36500 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, apierr.BadRequest("query parameter %s: want RFC 3339, YYYY-MM-DD or a duration such as 24h or 7d", name)
}

func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llmAdmin()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	groupBy := cmp.Or(q.Get("group_by"), "principal")
	keyOf := map[string]func(store.LLMUsage) string{
		"principal": func(u store.LLMUsage) string { return u.PrincipalID },
		"agent":     func(u store.LLMUsage) string { return u.Agent },
		"model":     func(u store.LLMUsage) string { return u.Provider + "/" + u.Model },
		"day":       func(u store.LLMUsage) string { return u.Day },
	}[groupBy]
	if keyOf == nil {
		return apierr.BadRequest("query parameter group_by: want principal, agent, model or day")
	}
	format := cmp.Or(q.Get("format"), "json")
	if format != "json" && format != "csv" {
		return apierr.BadRequest("query parameter format: want json or csv")
	}
	now := s.now().UTC()
	since, err := usageTime(r, "since", now, now.AddDate(0, 0, -30))
	if err != nil {
		return err
	}
	until, err := usageTime(r, "until", now, now)
	if err != nil {
		return err
	}
	if until.Before(since) {
		return apierr.BadRequest("until is before since")
	}
	f := store.LLMUsageFilter{FromDay: since.UTC().Format(time.DateOnly), ToDay: until.UTC().Format(time.DateOnly),
		Agent: q.Get("agent")}
	if p := q.Get("principal"); p != "" {
		f.Principals = []string{p}
	}
	rows, err := l.ListUsage(r.Context(), f)
	if err != nil {
		return err
	}
	byKey := map[string]*usageRow{}
	for _, u := range rows {
		k := keyOf(u)
		g := byKey[k]
		if g == nil {
			g = &usageRow{Key: k}
			byKey[k] = g
		}
		g.Calls += u.Calls
		g.TokensIn += u.TokensIn
		g.TokensOut += u.TokensOut
		g.CostMicros += u.CostMicros
	}
	out := make([]usageRow, 0, len(byKey))
	for _, g := range byKey {
		g.CostUSD = float64(g.CostMicros) / 1e6
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b usageRow) int { return cmp.Compare(a.Key, b.Key) })
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{groupBy, "llm_calls", "llm_tokens_in", "llm_tokens_out", "llm_cost_micros", "llm_cost_usd"})
		for _, g := range out {
			_ = cw.Write([]string{csvSafe(g.Key), fmt.Sprint(g.Calls), fmt.Sprint(g.TokensIn), fmt.Sprint(g.TokensOut),
				fmt.Sprint(g.CostMicros), strconv.FormatFloat(g.CostUSD, 'f', 6, 64)})
		}
		cw.Flush()
		return nil
	}
	return writeJSON(w, http.StatusOK, struct {
		GroupBy string     `json:"group_by"`
		FromDay string     `json:"from_day"`
		ToDay   string     `json:"to_day"`
		Rows    []usageRow `json:"rows"`
	}{groupBy, f.FromDay, f.ToDay, out})
}

// csvSafe keeps a spreadsheet from reading a cell as a formula.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
