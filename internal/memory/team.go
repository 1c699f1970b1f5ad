package memory

import (
	"context"
	"fmt"
	"strings"
)

// Team memory: agents whose specs name the same team (memory: {team:
// NAME}, internal/agents) share one namespace, "team.NAME", besides their
// own. The memory tools reach it with scope "team"; each write is still
// attributed to its principal, agent and run, and decided and screened
// like any other.

// Scopes of the memory tools' scope argument.
const (
	ScopeAgent = "agent" // the agent's own memory (the default)
	ScopeTeam  = "team"  // the team memory its spec names
)

// teamPrefix starts team namespaces; agent names have no dot, so no agent's
// own namespace has it.
const teamPrefix = "team."

// TeamNamespace is the memory namespace of a team.
func TeamNamespace(team string) string { return teamPrefix + team }

// IsTeamNamespace reports whether ns is a team's namespace.
func IsTeamNamespace(ns string) bool { return strings.HasPrefix(ns, teamPrefix) }

// SetTeamLookup installs how an agent's name maps to the team memory it
// shares (its current spec's).
func (s *Service) SetTeamLookup(fn func(ctx context.Context, agent string) (team string, ok bool)) {
	s.mu.Lock()
	s.teamOf = fn
	s.mu.Unlock()
}

// scoped is the actor acting on the memory scope names: its own ("" or
// "agent") or its team's. Writes keep their attribution.
func (a Actor) scoped(scope string) (Actor, error) {
	switch scope {
	case "", ScopeAgent:
		return a, nil
	case ScopeTeam:
		if a.Team == "" {
			return Actor{}, fmt.Errorf("%w: agent %s shares no team memory (memory.team in its spec)", ErrInvalid, a.Agent)
		}
		a.Namespace = a.Team
		return a, nil
	}
	return Actor{}, fmt.Errorf("%w: scope %q: want agent or team", ErrInvalid, scope)
}
