package govern

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
)

// AuditKey is the key of an audit event's detail under which a door
// records the governed action and its decision (AuditRecord), so that
// dry runs replay exactly what rules saw.
const AuditKey = "govern"

// AuditRecord is what a door records under detail[AuditKey]: the action
// (long strings cut at maxAuditString bytes) and the decision, which names
// the policy, its version and the rule.
type AuditRecord struct {
	Action   *Action  `json:"action"`
	Decision Decision `json:"decision"`
}

// maxAuditString bounds each recorded string attribute.
const maxAuditString = 4096

// Record returns the AuditRecord of an action and its decision:
//
//	st.detail[govern.AuditKey] = govern.Record(a, d)
func Record(a *Action, d Decision) AuditRecord {
	c := *a
	c.Credential = nil
	if a.Exec != nil {
		x := *a.Exec
		x.Argv, x.Shell = cut(x.Argv), cut(x.Shell)
		x.Args = cutAll(x.Args)
		c.Exec = &x
	}
	if a.Code != nil {
		x := *a.Code
		x.Code = cut(x.Code)
		c.Code = &x
	}
	if a.File != nil {
		x := *a.File
		x.Path, x.Dest = cut(x.Path), cut(x.Dest)
		c.File = &x
	}
	if a.MCP != nil {
		// Tool arguments may carry secrets: the log keeps their digest.
		x := *a.MCP
		x.Arguments = nil
		c.MCP = &x
	}
	if a.Port != nil && a.Port.Path != "" {
		x := *a.Port
		x.Path = cut(x.Path)
		c.Port = &x
	}
	return AuditRecord{Action: &c, Decision: d}
}

func cut(s string) string {
	if len(s) <= maxAuditString {
		return s
	}
	return s[:maxAuditString] + "...(cut)"
}

func cutAll(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	total := 0
	for i, s := range ss {
		out[i] = cut(s)
		total += len(out[i])
		if total > 4*maxAuditString {
			return append(out[:i+1], fmt.Sprintf("...(%d more)", len(ss)-i-1))
		}
	}
	return out
}

// ReplayResult is one event a draft policy would not simply have allowed.
type ReplayResult struct {
	Seq         int64     `json:"seq"`
	Time        time.Time `json:"time"`
	PrincipalID string    `json:"principal_id"`
	Kind        Kind      `json:"kind"`
	Target      string    `json:"target,omitempty"`
	// Recorded is the outcome the event recorded (success, denied, error).
	Recorded string  `json:"recorded"`
	Outcome  Outcome `json:"outcome"`
	RuleID   string  `json:"rule_id,omitempty"`
	Message  string  `json:"message,omitempty"`
	// Partial is true when the event predates governed audit records and
	// the action was rebuilt from the fields doors recorded then: rules on
	// attributes those lack (groups, labels, exec.shell of long scripts,
	// file sizes) see empty values.
	Partial bool `json:"partial,omitempty"`
	// Skipped lists allow and log_only rules that failed to evaluate.
	Skipped []string `json:"skipped,omitempty"`
}

// ReplayReport is the result of a dry run.
type ReplayReport struct {
	PolicyID      string          `json:"policy_id"`
	PolicyVersion int64           `json:"policy_version"`
	Events        int             `json:"events"`         // events read
	Evaluated     int             `json:"evaluated"`      // events that were actions the policy could see
	OutOfScope    int             `json:"out_of_scope"`   // actions of actors outside the policy's scope
	NotGovernable int             `json:"not_governable"` // events that are no action kind (reads, lists, system events)
	Counts        map[Outcome]int `json:"counts"`
	Results       []ReplayResult  `json:"results"` // every event not allowed: deny, require_approval, log_only
	ByRule        map[string]int  `json:"by_rule"` // rule id -> events it decided (other than allow)
	Kinds         map[Kind]int    `json:"kinds"`   // evaluated events per kind
	Rebuilt       int             `json:"rebuilt"` // events rebuilt from pre-governance fields (Partial)
}

// Replay evaluates a draft policy against recorded audit events and
// reports what it would have denied, held for approval or logged, changing
// nothing. The draft is evaluated alone: as if it were the only policy,
// with allow as the engine default, and no approvals exist (a
// require_approval result is reported as held). Events are matched
// against the draft's scope by their principal; group scopes only match
// events recorded with a governed action (which carries the groups).
func Replay(p Policy, events []audit.Event) (ReplayReport, error) {
	cp, err := compile(p, 0)
	if err != nil {
		return ReplayReport{}, err
	}
	rs := newRuleSet([]*compiledPolicy{cp})
	rep := ReplayReport{PolicyID: p.ID, PolicyVersion: p.Version, Counts: map[Outcome]int{},
		ByRule: map[string]int{}, Kinds: map[Kind]int{}}
	log := slog.New(slog.DiscardHandler)
	for _, ev := range events {
		rep.Events++
		a, partial, ok := ActionFromEvent(ev)
		if !ok {
			rep.NotGovernable++
			continue
		}
		if !p.Scope.applies(a) {
			rep.OutOfScope++
			continue
		}
		rep.Evaluated++
		rep.Kinds[a.Kind]++
		if partial {
			rep.Rebuilt++
		}
		d, _ := rs.decide(context.Background(), a, Allow, DefaultEvalTimeout, log)
		rep.Counts[d.Outcome]++
		if d.Outcome == Allow && len(d.Skipped) == 0 {
			continue
		}
		if d.Outcome != Allow {
			rep.ByRule[ruleName(d)]++
		}
		rep.Results = append(rep.Results, ReplayResult{Seq: ev.Seq, Time: ev.Time, PrincipalID: ev.PrincipalID,
			Kind: a.Kind, Target: ev.Target, Recorded: ev.Outcome, Outcome: d.Outcome, RuleID: d.RuleID,
			Message: d.Message, Partial: partial, Skipped: d.Skipped})
	}
	return rep, nil
}

func ruleName(d Decision) string {
	if d.RuleID == "" {
		return "(default)"
	}
	return d.RuleID
}

// ActionFromEvent rebuilds the action an audit event recorded. Events
// with a governed record (detail[AuditKey]) give it back exactly (up to
// the cut long strings); older events of the native API are rebuilt from
// the fields it recorded (partial is true); anything else (reads, lists,
// system events, E2B envd calls, whose audit has no command line) is no
// governable action (ok false).
func ActionFromEvent(ev audit.Event) (a *Action, partial, ok bool) {
	var detail map[string]json.RawMessage
	if len(ev.Detail) > 0 {
		_ = json.Unmarshal(ev.Detail, &detail)
	}
	if raw, found := detail[AuditKey]; found {
		var rec AuditRecord
		if err := json.Unmarshal(raw, &rec); err == nil && rec.Action != nil && rec.Action.Kind.Known() {
			if rec.Action.Time.IsZero() {
				rec.Action.Time = ev.Time
			}
			return rec.Action, false, true
		}
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(detail[k], &s)
		return s
	}
	strs := func(k string) []string {
		var s []string
		_ = json.Unmarshal(detail[k], &s)
		return s
	}
	num := func(k string) int64 {
		var n int64
		_ = json.Unmarshal(detail[k], &n)
		return n
	}
	a = &Action{Surface: SurfaceAPI, Principal: Principal{ID: ev.PrincipalID}, RequestID: ev.RequestID,
		SandboxID: ev.Target, Time: ev.Time}
	switch ev.Action {
	case "process.exec":
		a.Kind = KindExec
		a.Exec = NewExec(strs("cmd"), str("cwd"), str("user"), nil)
	case "process.pty":
		a.Kind = KindPTY
		a.Exec = NewExec(strings.Fields(str("cmd")), "", str("user"), nil)
	case "sandbox.create", "e2b.sandbox.create":
		a.Kind = KindSandboxCreate
		a.SandboxID = ""
		if ev.Action == "e2b.sandbox.create" {
			a.Surface = SurfaceE2B
		}
		a.Create = &SandboxCreate{Name: str("name"), Template: str("template"), EnvKeys: strs("env_keys"),
			Network: Network{Mode: str("network")}}
	case "file.read", "file.presigned_read":
		a.Kind = KindFileRead
		a.File = &File{Path: CleanPath(str("path"), ""), Op: "read"}
	case "file.write", "file.presigned_write", "file.mkdir":
		a.Kind = KindFileWrite
		op := "write"
		if ev.Action == "file.mkdir" {
			op = "mkdir"
		}
		a.File = &File{Path: CleanPath(str("path"), ""), Op: op, Size: num("bytes")}
	case "file.move":
		a.Kind = KindFileWrite
		a.File = &File{Path: CleanPath(str("source"), ""), Dest: CleanPath(str("destination"), ""), Op: "move"}
	case "file.remove":
		a.Kind = KindFileRemove
		a.File = &File{Path: CleanPath(str("path"), ""), Op: "remove"}
	case "code.run":
		a.Kind = KindCodeRun
		a.Code = &Code{Language: str("language")} // the code itself is recorded as a digest only
	case "port.url", "port.publish":
		a.Kind = KindPortPreview
		a.Port = &Port{Port: num("port"), Public: ev.Action == "port.publish"}
	case "template.build", "template.import":
		a.Kind = KindTemplateBuild
		op := "build"
		if ev.Action == "template.import" {
			a.Kind, op = KindTemplateImport, "import"
		}
		a.Template = &Template{Name: ev.Target, Op: op, Source: str("source")}
		a.SandboxID = ""
	case "key.create", "key.revoke":
		a.Kind = KindKeyChange
		a.Key = &KeyChange{Op: strings.TrimPrefix(ev.Action, "key."), KeyID: ev.Target,
			PrincipalID: str("principal_id"), Scopes: strs("scopes")}
		a.SandboxID = ""
	case "principal.create":
		a.Kind = KindPrincipalChange
		a.Subject = &PrincipalChange{Op: "create", ID: ev.Target, Kind: str("kind"), Name: str("name")}
		a.SandboxID = ""
	case "secret.use":
		a.Kind = KindSecretUse
		a.Surface = SurfaceEgress
		a.Secret = &Secret{ID: str("secret"), Grant: str("grant"), Host: str("host")}
	default:
		return nil, false, false
	}
	return a, true, true
}
