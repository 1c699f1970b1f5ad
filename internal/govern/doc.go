// Package govern is Warden's governed path: every action, whichever door
// it comes through (the native API, the E2B API, preview URLs, the egress
// path, later the MCP and LLM gateways), is described once as an Action
// and decided by one Engine, which runs the same stages in the same order:
//
//	access (scopes, ownership) -> rules (CEL policies) -> later: guardrails, middleware
//
// A door builds the Action, calls Engine.Decide (or DecideWait, to hold
// the caller while an approval is pending), returns Decision.Err() when it
// is not nil, does the action, and records Record(action, decision) in the
// action's audit event.
//
// Rules are CEL conditions in policies attached to a principal, a hosted
// agent, a group or the whole installation; they are compiled (and type
// checked against the attributes each kind has) when a policy is written,
// never at request time. Evaluation order: any matching deny rule wins,
// then any matching require_approval rule, then the first matching allow
// or log_only rule by priority and scope specificity, then the most
// specific policy default for the kind, then the engine default (allow).
// A deny or require_approval rule whose condition fails to evaluate denies
// (fail closed); an allow or log_only rule that fails is skipped.
//
// A require_approval outcome creates, or finds, a pending Approval for the
// identical action (ActionDigest); once another principal approves it, one
// identical retry passes. Replay evaluates a draft policy against audit
// history without changing anything. docs/governance.md is the user-facing
// description.
//
// Kinds are registered in one table (kindTable in action.go): adding a
// kind is a constant, an attribute struct with its Action field, and a
// row, which also declares its CEL variable.
package govern
