package daemon

import (
	"cmp"
	"context"

	"github.com/warden-sandbox/warden/internal/broker"
	"github.com/warden-sandbox/warden/internal/llmgw"
	"github.com/warden-sandbox/warden/internal/store"
)

// llmEgress is the broker's LLM meter (broker.LLMMeter): the model calls a
// sandbox sends straight to a known provider through the egress broker are
// metered by the LLM gateway's meter (llmgw egress.go, docs/llm.md),
// attributed to the sandbox, its owner and, when the owner is an agent
// principal (a hosted agent's runs), that agent.
type llmEgress struct{ d *daemon }

var _ broker.LLMMeter = llmEgress{}

// Known implements broker.LLMMeter. The gateway is built after the broker
// (and before any sandbox runs): until then nothing is known.
func (m llmEgress) Known(host string) bool {
	return m.d.llm != nil && m.d.llm.EgressKnown(host)
}

// Begin implements broker.LLMMeter.
func (m llmEgress) Begin(ctx context.Context, r broker.LLMRequest) (broker.LLMCall, *broker.LLMRefusal) {
	gw := m.d.llm
	if gw == nil {
		return nil, nil
	}
	agent := ""
	if r.PrincipalID != "" {
		if p, err := m.d.st.GetPrincipal(ctx, r.PrincipalID); err == nil && p.Kind == store.PrincipalAgent {
			agent = cmp.Or(p.Name, p.ID) // as the gateway labels an agent principal's calls
		}
	}
	call, status, body := gw.BeginEgress(ctx, llmgw.EgressRequest{SandboxID: r.SandboxID, Principal: r.PrincipalID, Agent: agent,
		Host: r.Host, API: r.API, Path: r.Path, Bytes: r.ContentLength})
	if status != 0 {
		return nil, &broker.LLMRefusal{Status: status, Body: body}
	}
	if call == nil {
		return nil, nil
	}
	return egressCall{ctx: ctx, c: call}, nil
}

// egressCall is a metered call: End records it.
type egressCall struct {
	ctx context.Context
	c   *llmgw.EgressCall
}

func (e egressCall) End(r broker.LLMResult) {
	e.c.End(e.ctx, llmgw.EgressResult{Status: r.Status, Stream: r.Stream, Usage: r.Usage, Model: r.Model,
		Unmetered: r.Unmetered, Err: r.Err})
}

// llmSandboxEnded folds an ended sandbox's LLM series (the gateway's
// metrics by sandbox) into sandbox="".
func (d *daemon) llmSandboxEnded(id string) {
	if d.llm != nil {
		d.llm.ForgetSandbox(id)
	}
}
