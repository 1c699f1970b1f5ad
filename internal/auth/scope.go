package auth

import (
	"fmt"
	"slices"
)

// Scope is a permission carried by an API key.
type Scope string

// Scopes. ScopeAdmin implies every other scope.
const (
	ScopeSandboxesCreate Scope = "sandboxes:create"
	ScopeSandboxesRead   Scope = "sandboxes:read"
	ScopeSandboxesExec   Scope = "sandboxes:exec"
	ScopeSandboxesDelete Scope = "sandboxes:delete"
	// ScopeSandboxesAll extends the sandbox and file scopes to sandboxes
	// owned by other principals.
	ScopeSandboxesAll Scope = "sandboxes:all"
	ScopeFilesRead    Scope = "files:read"
	ScopeFilesWrite   Scope = "files:write"
	ScopeKeysManage   Scope = "keys:manage"
	ScopeAuditRead    Scope = "audit:read"
	// Every principal may read and boot every template; a tag is changed
	// only by the principal that created it, or with ScopeAdmin.
	ScopeTemplatesRead  Scope = "templates:read"
	ScopeTemplatesWrite Scope = "templates:write"
	// Secrets: each principal manages its own (admin: all).
	ScopeSecretsRead  Scope = "secrets:read"
	ScopeSecretsWrite Scope = "secrets:write"
	// ScopeMetricsRead reads GET /metrics (daemon-wide figures).
	ScopeMetricsRead Scope = "metrics:read"
	// Governance (docs/governance.md): reading policies and dry runs,
	// writing them, and deciding approvals. ScopePoliciesWrite and
	// ScopeApprovalsDecide are human-only: never on an agent's key, and an
	// agent does not hold them even through ScopeAdmin.
	ScopePoliciesRead    Scope = "policies:read"
	ScopePoliciesWrite   Scope = "policies:write"
	ScopeApprovalsDecide Scope = "approvals:decide"
	// The MCP gateway (internal/mcpgw): ScopeMCPAdmin registers
	// connectors, defines virtual servers, grants them and approves tool
	// definitions (human-only); ScopeMCPUse calls the virtual servers
	// granted to the key's principal and binds its own credentials.
	ScopeMCPAdmin Scope = "mcp:admin"
	ScopeMCPUse   Scope = "mcp:use"
	// ScopeLLMUse calls models through the LLM gateway (internal/llmgw).
	ScopeLLMUse Scope = "llm:use"
	// Hosted agents (internal/agents): ScopeAgentsRead reads definitions,
	// runs and logs; ScopeAgentsWrite defines agents (human-only: an agent
	// does not make agents with principals of their own); ScopeAgentsRun
	// starts and cancels runs. A principal sees the agents it owns or is.
	ScopeAgentsRead  Scope = "agents:read"
	ScopeAgentsWrite Scope = "agents:write"
	ScopeAgentsRun   Scope = "agents:run"
	// The Agent Monitor (internal/monitor): ScopeMonitorRead reads every
	// timeline and redacts content; ScopeMonitorWrite reports an agent's
	// own events (the ingest endpoint, Claude Code hooks).
	ScopeMonitorRead  Scope = "monitor:read"
	ScopeMonitorWrite Scope = "monitor:write"
	// Agents' memory (internal/memory), owned by the installation:
	// ScopeMemoryRead lists, reads, diffs and exports any agent's memory;
	// ScopeMemoryReview redacts. Both human-only: agents use their own
	// memory through the MCP gateway's memory tools.
	ScopeMemoryRead   Scope = "memory:read"
	ScopeMemoryReview Scope = "memory:review"
	// ScopeWebhooksAdmin manages the outgoing webhooks (internal/webhook):
	// endpoints that receive audit events. Human-only: an agent must not
	// route the audit log to a receiver of its choosing.
	ScopeWebhooksAdmin Scope = "webhooks:admin"
	ScopeAdmin         Scope = "admin"
)

var allScopes = []Scope{
	ScopeSandboxesCreate, ScopeSandboxesRead, ScopeSandboxesExec, ScopeSandboxesDelete, ScopeSandboxesAll,
	ScopeFilesRead, ScopeFilesWrite, ScopeKeysManage, ScopeAuditRead, ScopeTemplatesRead, ScopeTemplatesWrite, ScopeSecretsRead, ScopeSecretsWrite, ScopeMetricsRead,
	ScopePoliciesRead, ScopePoliciesWrite, ScopeApprovalsDecide, ScopeMCPAdmin, ScopeMCPUse, ScopeLLMUse, ScopeAgentsRead, ScopeAgentsWrite, ScopeAgentsRun, ScopeMonitorRead, ScopeMonitorWrite, ScopeMemoryRead, ScopeMemoryReview, ScopeWebhooksAdmin, ScopeAdmin,
}

// HumanOnly reports whether s may never be held by an agent principal:
// an agent must not write the rules that govern it nor approve actions,
// nor grant itself MCP servers or approve their tools.
func (s Scope) HumanOnly() bool {
	return s == ScopePoliciesWrite || s == ScopeApprovalsDecide || s == ScopeMCPAdmin || s == ScopeAgentsWrite ||
		s == ScopeMemoryRead || s == ScopeMemoryReview || s == ScopeWebhooksAdmin
}

// AllScopes returns every defined scope, in documentation order.
func AllScopes() []Scope { return slices.Clone(allScopes) }

// Valid reports whether s is a defined scope.
func (s Scope) Valid() bool { return slices.Contains(allScopes, s) }

// ParseScopes validates scope names, for example from a key creation
// request, and returns them without duplicates in the order given.
func ParseScopes(names []string) ([]Scope, error) {
	out := make([]Scope, 0, len(names))
	for _, n := range names {
		s := Scope(n)
		if !s.Valid() {
			return nil, fmt.Errorf("unknown scope %q", n)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func scopeStrings(scopes []Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = string(s)
	}
	return out
}
