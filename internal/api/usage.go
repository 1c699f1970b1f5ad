package api

import (
	"context"
	"net/http"
	"strings"

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

// csvSafe keeps a spreadsheet from reading a cell as a formula.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
