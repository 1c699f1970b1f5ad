package govern

import "context"

// Support for the egress doors (internal/network's flows, internal/broker's
// secret substitutions), which decide on the packet and request path of a
// sandbox: they ask Governs first and skip describing the action at all when
// the engine could only allow it, so that an installation without egress
// rules pays one atomic load and a map lookup per connection.

// Governs reports whether a decision on an action of kind k can be anything
// but a plain allow that names no rule: a loaded rule applies to the kind
// (rules without kinds apply to every kind), a policy has a default for it
// (or a "*" default), the engine's default is not allow, or a stage after
// the rules acts on the kind (every stage but a KindedStage that says it
// does not). When it is false, Decide on such an action
// would allow it and record nothing worth an audit event, so a door on a
// hot path may skip it. It reads the rules in force (lock-free); policies
// written later are seen by the next call.
func (e *Engine) Governs(k Kind) bool {
	if e.cfg.Default != Allow {
		return true
	}
	for _, st := range e.cfg.After {
		if ks, ok := st.(KindedStage); !ok || ks.Governs(k) {
			return true
		}
	}
	rs := e.rules.Load()
	if kr := rs.byKind[k]; kr != nil && len(kr.deny)+len(kr.approval)+len(kr.rest) > 0 {
		return true
	}
	for _, p := range rs.policies {
		if _, ok := p.Defaults[k]; ok {
			return true
		}
		if _, ok := p.Defaults["*"]; ok {
			return true
		}
	}
	return false
}

// SandboxActor resolves a sandbox to the actor of the actions its own
// traffic makes (egress connections, secret uses): the principal that owns
// the sandbox, and what is known of the sandbox. The daemon supplies it
// (from a cache, so that a decision reads no store once a sandbox is
// known).
type SandboxActor func(ctx context.Context, sandboxID string) (Principal, *SandboxInfo, error)
