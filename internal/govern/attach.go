package govern

import "maps"

// Policies attached to principals: a hosted agent's spec names policies
// (docs/agents.md) that apply to its principal's actions besides their
// own scope. Attachments live in memory; their owner (internal/agents)
// sets them again when the daemon starts.

// Attach makes the policies ids apply to the actions of principalID, in
// addition to their own scope, replacing what was attached to it (none:
// detach). An ID without a loaded policy has no effect until one exists.
func (e *Engine) Attach(principalID string, ids []string) {
	if principalID == "" {
		return
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	m := map[string]map[string]bool{}
	if old := e.attach.Load(); old != nil {
		m = maps.Clone(*old)
	}
	delete(m, principalID)
	if len(ids) > 0 {
		set := make(map[string]bool, len(ids))
		for _, id := range ids {
			set[id] = true
		}
		m[principalID] = set
	}
	e.attach.Store(&m)
}

// Attached returns the policy IDs attached to a principal.
func (e *Engine) Attached(principalID string) []string {
	var out []string
	for id := range e.attachedTo(principalID) {
		out = append(out, id)
	}
	return out
}

// HasPolicy reports whether a policy with the ID is loaded.
func (e *Engine) HasPolicy(id string) bool {
	for _, cp := range e.rules.Load().policies {
		if cp.ID == id {
			return true
		}
	}
	return false
}

func (e *Engine) attachedTo(principalID string) map[string]bool {
	m := e.attach.Load()
	if m == nil || principalID == "" {
		return nil
	}
	return (*m)[principalID]
}

// covers reports whether the policy applies to the action: its scope
// covers the actor, or it is attached to the actor's principal.
func (p *Policy) covers(a *Action) bool {
	return p.Scope.applies(a) || a.attached[p.ID]
}
