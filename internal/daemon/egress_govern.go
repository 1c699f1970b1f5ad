package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/warden-sandbox/warden/internal/broker"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// egressActors resolves a sandbox to the actor of its own traffic (egress
// connections, secret uses) for the governed path: its owner principal.
// Each sandbox is read from the store once, on its first governed flow or
// use (never while no rule covers egress), and forgotten when it ends.
type egressActors struct {
	st store.Store

	mu sync.Mutex
	m  map[string]egressActor
}

type egressActor struct {
	p  govern.Principal
	sb *govern.SandboxInfo
}

func (e *egressActors) actor(ctx context.Context, sandboxID string) (govern.Principal, *govern.SandboxInfo, error) {
	e.mu.Lock()
	a, ok := e.m[sandboxID]
	e.mu.Unlock()
	if ok {
		return a.p, a.sb, nil
	}
	sb, err := e.st.GetSandbox(ctx, sandboxID)
	if err != nil {
		return govern.Principal{}, nil, fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	a = egressActor{p: govern.Principal{ID: sb.Owner},
		sb: &govern.SandboxInfo{ID: sb.ID, Name: sb.Name, Template: sb.Template, Owner: sb.Owner, Metadata: sb.Metadata}}
	if sb.Owner != "" {
		pr, err := e.st.GetPrincipal(ctx, sb.Owner)
		switch {
		case err == nil:
			a.p.Kind, a.p.Owner = pr.Kind, pr.CreatedBy
		case !errors.Is(err, store.ErrNotFound):
			return govern.Principal{}, nil, fmt.Errorf("principal %s: %w", sb.Owner, err)
		}
	}
	e.mu.Lock()
	if e.m == nil {
		e.m = map[string]egressActor{}
	}
	e.m[sandboxID] = a
	e.mu.Unlock()
	return a.p, a.sb, nil
}

// build records a template build's sandbox, which has no sandbox record:
// its traffic is the traffic of the principal who asked for the build, so
// rules on egress decide it as theirs instead of refusing it as the
// traffic of an unknown owner. The returned func forgets it.
func (e *egressActors) build(sandboxID, principal string) (forget func()) {
	a := egressActor{p: govern.Principal{ID: principal},
		sb: &govern.SandboxInfo{ID: sandboxID, Name: "build", Owner: principal}}
	if pr, err := e.st.GetPrincipal(context.Background(), principal); err == nil {
		a.p.Kind, a.p.Owner = pr.Kind, pr.CreatedBy
	}
	e.mu.Lock()
	if e.m == nil {
		e.m = map[string]egressActor{}
	}
	e.m[sandboxID] = a
	e.mu.Unlock()
	return func() { e.forget(sandboxID) }
}

func (e *egressActors) forget(sandboxID string) {
	e.mu.Lock()
	delete(e.m, sandboxID)
	e.mu.Unlock()
}

// egressGovernance wires the governed path into the egress path: flows
// (network.EgressGovernor) and secret substitutions
// (broker.SecretUseGovernor), both deciding with the daemon's engine and
// auditing to its log. It returns the network's Governor and the broker's
// Govern hook.
func (d *daemon) egressGovernance() (network.Governor, func(context.Context, *broker.UseEvent) error) {
	d.egress = &egressActors{st: d.st}
	log := d.log.With("subsystem", "govern")
	flows := &network.EgressGovernor{Engine: d.gov, Actor: d.egress.actor, Audit: d.audits, Log: log}
	uses := &broker.SecretUseGovernor{Engine: d.gov, Actor: d.egress.actor, Audit: d.audits, Log: log,
		SecretName: func(id string) string {
			if d.vault == nil {
				return ""
			}
			s, err := d.vault.Get(id)
			if err != nil {
				return ""
			}
			return s.Name
		}}
	return flows, uses.Decide
}
