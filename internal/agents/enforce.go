package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
)

// What a spec enforces per agent besides its sandbox: the secrets its
// runs' sandboxes may use (brokered grants), the governance policies
// attached to its principal, and the team memory it shares
// (docs/agents.md, docs/memory.md).

// SecretGrant is one secret of a spec: a secret of the agent's owner that
// each run's sandbox may use against Hosts, as a grant of the secrets
// store made to that sandbox (the shape of POST /v1/secrets/{id}/grants):
// the sandbox sees only a placeholder (in EnvName), which the broker
// replaces with the value in the Header of requests to Hosts.
type SecretGrant struct {
	// Secret is the name of a secret of the agent's owner (or, failing
	// that, a secret's ID).
	Secret     string   `json:"secret" yaml:"secret"`
	Hosts      []string `json:"hosts" yaml:"hosts"`
	Header     string   `json:"header,omitempty" yaml:"header,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty" yaml:"path_prefix,omitempty"`
	EnvName    string   `json:"env_name,omitempty" yaml:"env_name,omitempty"`

	// legacy: the older form, a bare name, recorded and never granted;
	// kept so that stored versions still parse. New definitions are
	// refused with it.
	legacy bool
}

// UnmarshalJSON reads an entry or the older bare name.
func (g *SecretGrant) UnmarshalJSON(b []byte) error {
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '"' {
		var name string
		if err := json.Unmarshal(b, &name); err != nil {
			return err
		}
		*g = SecretGrant{Secret: name, legacy: true}
		return nil
	}
	type plain SecretGrant
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	*g = SecretGrant(p)
	return nil
}

// MarshalJSON writes an entry, or a legacy entry as its bare name.
func (g SecretGrant) MarshalJSON() ([]byte, error) {
	if g.legacy {
		return json.Marshal(g.Secret)
	}
	type plain SecretGrant
	return json.Marshal(plain(g))
}

// Legacy reports whether the entry is the older bare name (not granted).
func (g SecretGrant) Legacy() bool { return g.legacy }

// MemorySpec is the agent's memory beyond its own.
type MemorySpec struct {
	// Team names a memory shared by every agent that names it (its
	// namespace is memory.TeamNamespace: "team.NAME"); the owner of the
	// first agent that named it owns it.
	Team string `json:"team,omitempty" yaml:"team,omitempty"`
}

// ForbiddenError is a definition its author may not make (a 403): a
// secret it may not use, a policy attachment without policies:write, a
// team memory of another owner.
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

func forbidden(format string, args ...any) error {
	return &ForbiddenError{Msg: fmt.Sprintf(format, args...)}
}

// validateEnforced checks the shape of secrets, policies and memory.
func (s *Spec) validateEnforced() error {
	envs := map[string]bool{}
	for i, g := range s.Secrets {
		if g.legacy {
			continue
		}
		if g.Secret == "" {
			return fmt.Errorf("secrets[%d]: secret (a secret's name) is required", i)
		}
		// The grant's own checks, on a stand-in secret and sandbox.
		if _, err := secrets.NormalizeGrant(secrets.Grant{SecretID: "x", Sandbox: "x", Hosts: g.Hosts, Header: g.Header,
			PathPrefix: g.PathPrefix, EnvName: g.EnvName}); err != nil {
			return fmt.Errorf("secrets[%d] (%s): %w", i, g.Secret, err)
		}
		if g.EnvName != "" {
			if strings.HasPrefix(g.EnvName, "WARDEN_") {
				return fmt.Errorf("secrets[%d]: env_name %s: the WARDEN_ variables are the run's own", i, g.EnvName)
			}
			if envs[g.EnvName] {
				return fmt.Errorf("secrets[%d]: env_name %s is given twice", i, g.EnvName)
			}
			envs[g.EnvName] = true
		}
	}
	seen := map[string]bool{}
	for i, id := range s.Policies {
		if id == "" || len(id) > 128 {
			return fmt.Errorf("policies[%d]: want a policy ID", i)
		}
		if seen[id] {
			return fmt.Errorf("policies[%d]: %s is named twice", i, id)
		}
		seen[id] = true
	}
	if s.Memory != nil && s.Memory.Team != "" && !nameRE.MatchString(s.Memory.Team) {
		return fmt.Errorf("memory.team %q: want 1-63 of a-z, 0-9 and -, starting with a letter", s.Memory.Team)
	}
	return nil
}

// granted is the entries of gs that are granted (not legacy).
func granted(gs []SecretGrant) []SecretGrant {
	var out []SecretGrant
	for _, g := range gs {
		if !g.legacy {
			out = append(out, g)
		}
	}
	return out
}

// team is the spec's team ("" none).
func (s *Spec) team() string {
	if s.Memory == nil {
		return ""
	}
	return s.Memory.Team
}

// Grants gives runs' sandboxes their spec's secrets (the daemon, over the
// secrets store and the broker).
type Grants interface {
	// CheckSecrets resolves each entry among owner's secrets (a name, or
	// an ID) and checks by may use it (it owns it, or is an admin); an
	// *InvalidError or *ForbiddenError says why not.
	CheckSecrets(ctx context.Context, by auth.Identity, owner string, gs []SecretGrant) error
	// SyncSandbox makes the grants managed for agent on sandboxID exactly
	// gs (resolved among owner's secrets) and, with apply, hands them to
	// the running sandbox; it returns the variables a run's process needs
	// (the placeholders and the broker's CA bundle).
	SyncSandbox(ctx context.Context, agent, owner, principalID, sandboxID string, gs []SecretGrant, apply bool) (map[string]string, error)
}

// Policies attaches governance policies to principals (*govern.Engine).
type Policies interface {
	HasPolicy(id string) bool
	Attach(principalID string, ids []string)
}

// Teams keeps who owns each team memory (the store).
type Teams interface {
	// ClaimMemoryTeam records owner as the team's owner unless it has one,
	// and returns the owner it has.
	ClaimMemoryTeam(ctx context.Context, name, owner string, at time.Time) (string, error)
}

// checkEnforced checks what the definition asks beyond its shape, against
// the agent's current spec (prev, nil for a new agent): entries that did
// not change are not checked again, so that an owner can edit a definition
// an admin extended.
func (s *Service) checkEnforced(ctx context.Context, by auth.Identity, owner string, spec Spec, prev *Spec) error {
	for i, g := range spec.Secrets {
		if g.legacy {
			return invalid("agent spec: secrets[%d]: a bare name (%q) grants nothing: give {secret, hosts, env_name...}", i, g.Secret)
		}
	}
	if gs := spec.Secrets; len(gs) > 0 {
		if s.cfg.Grants == nil {
			return invalid("agent spec: secrets: this daemon has no secrets store")
		}
		var fresh []SecretGrant
		for _, g := range gs {
			if prev == nil || !slices.ContainsFunc(prev.Secrets, func(p SecretGrant) bool { return p.Secret == g.Secret }) {
				fresh = append(fresh, g)
			}
		}
		if len(fresh) > 0 {
			if err := s.cfg.Grants.CheckSecrets(ctx, by, owner, fresh); err != nil {
				return err
			}
		}
	}
	if len(spec.Policies) > 0 {
		if s.cfg.Policies == nil {
			return invalid("agent spec: policies: this daemon has no governance engine")
		}
		for _, id := range spec.Policies {
			if !s.cfg.Policies.HasPolicy(id) {
				return invalid("agent spec: policies: no policy %q", id)
			}
		}
		var old []string
		if prev != nil {
			old = prev.Policies
		}
		if !sameSet(old, spec.Policies) && !by.Has(auth.ScopePoliciesWrite) {
			return forbidden("agent spec: policies: attaching governance policies needs scope %s", auth.ScopePoliciesWrite)
		}
	}
	if team := spec.team(); team != "" {
		if s.cfg.Teams == nil {
			return invalid("agent spec: memory.team: this daemon keeps no team memory")
		}
		got, err := s.cfg.Teams.ClaimMemoryTeam(ctx, team, owner, s.now().UTC())
		if err != nil {
			return fmt.Errorf("agent spec: memory.team %s: %w", team, err)
		}
		if got != owner && !by.Has(auth.ScopeAdmin) && (prev == nil || prev.team() != team) {
			return forbidden("agent spec: memory.team %q belongs to another owner: only its owner's agents (or an admin) may join it", team)
		}
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// attach attaches the spec's policies to the agent's principal (none:
// detaches).
func (s *Service) attach(a store.Agent, spec *Spec) {
	if s.cfg.Policies == nil {
		return
	}
	var ids []string
	if spec != nil {
		ids = spec.Policies
	}
	s.cfg.Policies.Attach(a.PrincipalID, ids)
}

// attachAll attaches every agent's current policies (at start).
func (s *Service) attachAll(ctx context.Context) error {
	if s.cfg.Policies == nil {
		return nil
	}
	all, err := s.cfg.Store.ListAgents(ctx)
	if err != nil {
		return fmt.Errorf("agents: attach policies: %w", err)
	}
	for _, a := range all {
		spec, err := ParseSpec(a.Spec)
		if err != nil {
			s.log.Warn("agents: an agent's spec does not parse: its policies are not attached", "agent", a.Name, "err", err)
			continue
		}
		s.attach(a, &spec)
	}
	return nil
}

// syncSecrets gives a run's sandbox its version's secrets. A fresh sandbox
// without secrets needs nothing; a persistent one is synced whatever the
// spec holds, so that a secret removed from it is revoked.
func (s *Service) syncSecrets(ctx context.Context, a store.Agent, spec Spec, sandboxID string, apply bool) (map[string]string, error) {
	gs := granted(spec.Secrets)
	if s.cfg.Grants == nil {
		if len(gs) > 0 {
			return nil, errors.New("secrets: this daemon has no secrets store")
		}
		return nil, nil
	}
	if len(gs) == 0 && spec.Sandbox != SandboxPersistent {
		return nil, nil
	}
	return s.cfg.Grants.SyncSandbox(ctx, a.Name, a.OwnerID, a.PrincipalID, sandboxID, gs, apply)
}

// TeamOf is the team memory an agent shares (its current spec's), if any.
func (s *Service) TeamOf(ctx context.Context, agentName string) (string, bool) {
	a, err := s.cfg.Store.GetAgentByName(ctx, agentName)
	if err != nil {
		return "", false
	}
	spec, err := ParseSpec(a.Spec)
	if err != nil || spec.team() == "" {
		return "", false
	}
	return spec.team(), true
}
