// Package agents runs hosted agents (docs/agents.md): definitions with
// their own principal and versions, runs in sandboxes with logs kept, and
// the triggers that start them (manual, cron, signed webhooks, Slack).
package agents

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/network"
)

// Sandbox modes of an agent.
const (
	SandboxFresh      = "fresh"      // a new sandbox per run, killed at its end
	SandboxPersistent = "persistent" // one sandbox per agent, paused between runs
)

// Overlap policies of a cron trigger.
const (
	OverlapSkip     = "skip"     // no new run while one of the agent's runs lives
	OverlapQueue    = "queue"    // queue one run behind the live ones
	OverlapParallel = "parallel" // up to MaxParallel cron runs at once
)

// Limits of a definition.
const (
	MaxInputBytes     = 256 << 10
	maxEnvInputBytes  = 64 << 10
	DefaultRunTimeout = 10 * time.Minute
	MaxRunTimeout     = 24 * time.Hour
	maxConcurrency    = 64
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Spec is an agent's definition: agent.yaml, as JSON on the API.
type Spec struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	// Template boots the run's sandbox ("" the daemon's default).
	Template string `json:"template,omitempty" yaml:"template,omitempty"`
	// Command is the entry program's argv, run in the sandbox.
	Command []string          `json:"command" yaml:"command"`
	Env     map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty" yaml:"workdir,omitempty"`
	// Sandbox is SandboxFresh (default) or SandboxPersistent.
	Sandbox string `json:"sandbox,omitempty" yaml:"sandbox,omitempty"`
	// MCPServers are virtual MCP servers granted to the agent's principal
	// (the creator needs mcp:admin).
	MCPServers []string `json:"mcp_servers,omitempty" yaml:"mcp_servers,omitempty"`
	// Secrets are the brokered grants each run's sandbox gets (secrets.go):
	// secrets of the agent's owner, usable on the named hosts, whose
	// values never enter the sandbox.
	Secrets []SecretGrant `json:"secrets,omitempty" yaml:"secrets,omitempty"`
	// Memory names the team memory the agent shares (secrets.go).
	Memory *MemorySpec `json:"memory,omitempty" yaml:"memory,omitempty"`
	// Scopes are the scopes of each run's API key (default mcp:use and
	// llm:use); human-only scopes are refused.
	Scopes []string `json:"scopes,omitempty" yaml:"scopes,omitempty"`
	// LLMBudget caps what the agent's runs spend on the LLM gateway
	// together (enforced by the gateway as a budget scoped to the agent;
	// budget.go). The older form, a string, names a budget and is recorded.
	LLMBudget *LLMBudget      `json:"llm_budget,omitempty" yaml:"llm_budget,omitempty"`
	Network   *network.Policy `json:"network,omitempty" yaml:"network,omitempty"`
	Limits    Limits          `json:"limits,omitzero" yaml:"limits,omitempty"`
	// Policies are IDs of governance policies attached to the agent's
	// principal: they apply to its runs besides their own scope.
	Policies []string `json:"policies,omitempty" yaml:"policies,omitempty"`
	// Concurrency caps the agent's runs at once (default 1); more wait queued.
	Concurrency int      `json:"concurrency,omitempty" yaml:"concurrency,omitempty"`
	Triggers    Triggers `json:"triggers,omitzero" yaml:"triggers,omitempty"`
}

// Limits bound each run.
type Limits struct {
	CPUMillis      int64 `json:"cpu_millis,omitempty" yaml:"cpu_millis,omitempty"`
	MemoryMB       int64 `json:"memory_mb,omitempty" yaml:"memory_mb,omitempty"`
	DiskMB         int64 `json:"disk_mb,omitempty" yaml:"disk_mb,omitempty"`
	TimeoutSeconds int   `json:"timeout_seconds,omitempty" yaml:"timeout_seconds,omitempty"`
}

// Triggers are what starts runs besides manual runs (always allowed to
// holders of agents:run).
type Triggers struct {
	Cron []CronTrigger `json:"cron,omitempty" yaml:"cron,omitempty"`
	// Webhook accepts POST /v1/agents/{name}/webhook signed with the
	// agent's webhook secret.
	Webhook bool          `json:"webhook,omitempty" yaml:"webhook,omitempty"`
	Slack   *SlackTrigger `json:"slack,omitempty" yaml:"slack,omitempty"`
}

// CronTrigger is a schedule: five fields (minute hour day-of-month month
// day-of-week) in TimeZone, or "@every <duration>" (at least 1s).
type CronTrigger struct {
	Schedule    string          `json:"schedule" yaml:"schedule"`
	TimeZone    string          `json:"timezone,omitempty" yaml:"timezone,omitempty"`
	Overlap     string          `json:"overlap,omitempty" yaml:"overlap,omitempty"`
	MaxParallel int             `json:"max_parallel,omitempty" yaml:"max_parallel,omitempty"`
	Input       json.RawMessage `json:"input,omitempty" yaml:"-"`
	// CatchUp fires once, when wardend starts, for fires missed while it
	// was down (of any number); without it they are skipped.
	CatchUp bool `json:"catch_up,omitempty" yaml:"catch_up,omitempty"`
}

// SlackTrigger wires Slack events for the agent's bot to runs.
type SlackTrigger struct {
	// SigningSecret and BotToken name secrets (in the secrets store) of
	// the Slack app; the bot token never enters the sandbox.
	SigningSecret string   `json:"signing_secret" yaml:"signing_secret"`
	BotToken      string   `json:"bot_token" yaml:"bot_token"`
	Channels      []string `json:"channels,omitempty" yaml:"channels,omitempty"`
	// APIURL overrides https://slack.com/api (tests, proxies).
	APIURL string `json:"api_url,omitempty" yaml:"api_url,omitempty"`
	// NoFinalReply turns off the reply a run that did not reply itself
	// gets at its end (its output, or how it failed).
	NoFinalReply bool `json:"no_final_reply,omitempty" yaml:"no_final_reply,omitempty"`
}

// defaultScopes are the scopes of a run's key when the spec names none.
var defaultScopes = []string{string(auth.ScopeMCPUse), string(auth.ScopeLLMUse)}

// Validate checks s and fills its defaults.
func (s *Spec) Validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("name %q: want 1-63 of a-z, 0-9 and -, starting with a letter", s.Name)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return errors.New("command: the entry program's argv is required")
	}
	switch s.Sandbox {
	case "":
		s.Sandbox = SandboxFresh
	case SandboxFresh, SandboxPersistent:
	default:
		return fmt.Errorf("sandbox %q: want fresh or persistent", s.Sandbox)
	}
	for k := range s.Env {
		if k == "" || len(k) > 256 {
			return fmt.Errorf("env: bad variable name %q", k)
		}
	}
	if len(s.Scopes) == 0 {
		s.Scopes = append([]string(nil), defaultScopes...)
	}
	scopes, err := auth.ParseScopes(s.Scopes)
	if err != nil {
		return fmt.Errorf("scopes: %w", err)
	}
	for _, sc := range scopes {
		if sc.HumanOnly() || sc == auth.ScopeAdmin || sc == auth.ScopeKeysManage {
			return fmt.Errorf("scopes: %q may not be held by an agent", sc)
		}
	}
	if s.Network != nil {
		if err := s.Network.Validate(); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	if s.Limits.TimeoutSeconds < 0 || time.Duration(s.Limits.TimeoutSeconds)*time.Second > MaxRunTimeout {
		return fmt.Errorf("limits.timeout_seconds %d: want 0 to %d", s.Limits.TimeoutSeconds, int(MaxRunTimeout/time.Second))
	}
	if s.Limits.CPUMillis < 0 || s.Limits.MemoryMB < 0 || s.Limits.DiskMB < 0 {
		return errors.New("limits: negative value")
	}
	switch {
	case s.Concurrency == 0:
		s.Concurrency = 1
	case s.Concurrency < 0 || s.Concurrency > maxConcurrency:
		return fmt.Errorf("concurrency %d: want 1 to %d", s.Concurrency, maxConcurrency)
	}
	for i := range s.Triggers.Cron {
		c := &s.Triggers.Cron[i]
		if _, err := ParseSchedule(c.Schedule, c.TimeZone); err != nil {
			return fmt.Errorf("triggers.cron[%d]: %w", i, err)
		}
		switch c.Overlap {
		case "":
			c.Overlap = OverlapSkip
		case OverlapSkip, OverlapQueue:
		case OverlapParallel:
			if c.MaxParallel == 0 {
				c.MaxParallel = 1
			}
			if c.MaxParallel < 0 || c.MaxParallel > maxConcurrency {
				return fmt.Errorf("triggers.cron[%d].max_parallel %d: want 1 to %d", i, c.MaxParallel, maxConcurrency)
			}
		default:
			return fmt.Errorf("triggers.cron[%d].overlap %q: want skip, queue or parallel", i, c.Overlap)
		}
		if len(c.Input) > 0 && !json.Valid(c.Input) {
			return fmt.Errorf("triggers.cron[%d].input is not JSON", i)
		}
	}
	if err := s.validateEnforced(); err != nil {
		return err
	}
	if err := s.LLMBudget.validate(); err != nil {
		return fmt.Errorf("llm_budget: %w", err)
	}
	if sl := s.Triggers.Slack; sl != nil && (sl.SigningSecret == "" || sl.BotToken == "") {
		return errors.New("triggers.slack: signing_secret and bot_token (secret names) are required")
	}
	return nil
}

// Timeout is a run's time limit.
func (s *Spec) Timeout() time.Duration {
	if s.Limits.TimeoutSeconds > 0 {
		return time.Duration(s.Limits.TimeoutSeconds) * time.Second
	}
	return DefaultRunTimeout
}

// ParseSpec decodes and validates a spec from JSON.
func ParseSpec(b []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("agent spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("agent spec: %w", err)
	}
	return s, nil
}
