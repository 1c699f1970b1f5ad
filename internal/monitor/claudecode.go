package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Claude Code hooks (docs/monitor.md): a hook command POSTs the JSON
// Claude Code gives it on stdin to /v1/monitor/hooks/claude-code. Each
// hook event becomes one timeline event; a PreToolUse is also decided as
// an agent.tool action, and a deny is answered in Claude Code's hook
// output format so the tool call is blocked.

// ClientClaudeCode is AgentTool.Client of Claude Code's hooks.
const ClientClaudeCode = "claude-code"

// Timeline kinds of Claude Code's hook events.
var claudeKinds = map[string]string{
	"PreToolUse":       string(govern.KindAgentTool),
	"PostToolUse":      "agent.tool_result",
	"UserPromptSubmit": "agent.prompt",
	"SessionStart":     "agent.session_start",
	"SessionEnd":       "agent.session_end",
	"Stop":             "agent.stop",
	"SubagentStop":     "agent.stop",
	"Notification":     "agent.notification",
	"PreCompact":       "agent.compact",
}

// ClaudeCodeInput is the JSON a Claude Code hook reads on stdin (the
// common fields, then each event's).
type ClaudeCodeInput struct {
	SessionID      string `json:"session_id"`
	TranscriptPath string `json:"transcript_path"`
	Cwd            string `json:"cwd"`
	PermissionMode string `json:"permission_mode"`
	HookEventName  string `json:"hook_event_name"`
	// PreToolUse, PostToolUse.
	ToolName     string          `json:"tool_name"`
	ToolInput    map[string]any  `json:"tool_input"`
	ToolResponse json.RawMessage `json:"tool_response"`
	ToolUseID    string          `json:"tool_use_id"`
	// UserPromptSubmit.
	Prompt string `json:"prompt"`
	// SessionStart (startup, resume, clear, compact), SessionEnd (its
	// reason), Stop and SubagentStop, Notification.
	Source         string `json:"source"`
	Reason         string `json:"reason"`
	StopHookActive bool   `json:"stop_hook_active"`
	Message        string `json:"message"`
}

// ParseClaudeCode decodes a hook's input. hook_event_name and session_id
// are required; PreToolUse and PostToolUse need tool_name.
func ParseClaudeCode(raw []byte) (ClaudeCodeInput, error) {
	var in ClaudeCodeInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return in, fmt.Errorf("claude code hook input: %w", err)
	}
	switch {
	case in.HookEventName == "":
		return in, errors.New("claude code hook input: no hook_event_name")
	case in.SessionID == "":
		return in, errors.New("claude code hook input: no session_id")
	case len(in.HookEventName) > 64 || len(in.SessionID) > 256 || len(in.ToolName) > 256:
		return in, errors.New("claude code hook input: hook_event_name, session_id or tool_name too long")
	case (in.HookEventName == "PreToolUse" || in.HookEventName == "PostToolUse") && in.ToolName == "":
		return in, fmt.Errorf("claude code hook input: %s without tool_name", in.HookEventName)
	}
	return in, nil
}

// Kind is the timeline kind of the hook event ("agent.hook" for events
// without a mapping of their own).
func (in ClaudeCodeInput) Kind() string {
	if k, ok := claudeKinds[in.HookEventName]; ok {
		return k
	}
	return "agent.hook"
}

// AgentTool describes the tool call of a PreToolUse or PostToolUse.
func (in ClaudeCodeInput) AgentTool() *govern.AgentTool {
	t := &govern.AgentTool{Client: ClientClaudeCode, Name: in.ToolName, Input: in.ToolInput,
		Session: in.SessionID, Cwd: in.Cwd}
	if rest, ok := strings.CutPrefix(in.ToolName, "mcp__"); ok {
		if server, tool, ok := strings.Cut(rest, "__"); ok {
			t.Server, t.Tool = server, tool
		}
	}
	str := func(k string) string { s, _ := in.ToolInput[k].(string); return s }
	t.Command = str("command")
	t.FilePath = str("file_path")
	if t.FilePath == "" {
		t.FilePath = str("notebook_path")
	}
	t.URL = str("url")
	return t
}

// Event is the timeline event of the hook input, reported by principal
// (an agent when isAgent). The prompt, the tool input and the tool
// response are its content (redactable, kept for the content retention);
// the detail keeps what identifies the call.
func (in ClaudeCodeInput) Event(principal string, isAgent bool) store.MonitorEvent {
	e := store.MonitorEvent{Kind: in.Kind(), Source: SourceHook, Principal: principal, Session: in.SessionID,
		Action: in.HookEventName, Target: in.ToolName}
	if isAgent {
		e.Agent = principal
	}
	d := map[string]any{"client": ClientClaudeCode, "hook_event_name": in.HookEventName, "cwd": in.Cwd}
	set := func(k, v string) {
		if v != "" {
			d[k] = cut(v, 4096)
		}
	}
	set("transcript_path", in.TranscriptPath)
	set("permission_mode", in.PermissionMode)
	set("tool_use_id", in.ToolUseID)
	set("source", in.Source)
	set("reason", in.Reason)
	set("message", in.Message)
	var content string
	switch in.HookEventName {
	case "PreToolUse", "PostToolUse":
		t := in.AgentTool()
		set("tool_name", t.Name)
		set("server", t.Server)
		set("tool", t.Tool)
		set("command", t.Command)
		set("file_path", t.FilePath)
		set("url", t.URL)
		if in.HookEventName == "PostToolUse" {
			content = string(in.ToolResponse)
		} else if len(in.ToolInput) > 0 {
			b, _ := json.Marshal(in.ToolInput)
			content = string(b)
		}
		switch {
		case t.Command != "":
			e.Target = in.ToolName + ": " + cut(t.Command, 512)
		case t.FilePath != "":
			e.Target = in.ToolName + ": " + cut(t.FilePath, 512)
		case t.URL != "":
			e.Target = in.ToolName + ": " + cut(t.URL, 512)
		}
	case "UserPromptSubmit":
		content = in.Prompt
	}
	if in.StopHookActive {
		d["stop_hook_active"] = true
	}
	e.Detail, _ = json.Marshal(d)
	setContent(&e, content)
	return e
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ClaudeCodeOutput is the JSON a hook prints for Claude Code to read.
// The zero value ({}) lets Claude Code go on as it would without the
// hook: Warden never answers "allow", which would skip Claude Code's own
// permission prompts.
type ClaudeCodeOutput struct {
	HookSpecificOutput *ClaudeCodeHookOutput `json:"hookSpecificOutput,omitempty"`
}

// ClaudeCodeHookOutput is a PreToolUse's permission decision.
type ClaudeCodeHookOutput struct {
	HookEventName            string `json:"hookEventName"`
	PermissionDecision       string `json:"permissionDecision"` // deny or ask
	PermissionDecisionReason string `json:"permissionDecisionReason"`
}

// ClaudeCodeAnswer is the answer to a PreToolUse decided d: deny (a
// deny, or an approval rejected or expired) or ask (require_approval:
// Claude Code asks its user), else no opinion.
func ClaudeCodeAnswer(d govern.Decision) ClaudeCodeOutput {
	var decision string
	switch d.Outcome {
	case govern.Deny:
		decision = "deny"
	case govern.RequireApproval:
		decision = "ask"
	default:
		return ClaudeCodeOutput{}
	}
	reason := "Warden: " + d.Message
	if d.Message == "" {
		reason = "Warden: denied by policy"
	}
	if d.RuleID != "" {
		reason += " (rule " + d.RuleID + ")"
	}
	if d.Outcome == govern.RequireApproval && d.ApprovalID != "" {
		reason += "; approval " + d.ApprovalID + " is pending"
	}
	return ClaudeCodeOutput{HookSpecificOutput: &ClaudeCodeHookOutput{HookEventName: "PreToolUse",
		PermissionDecision: decision, PermissionDecisionReason: reason}}
}
