package govern

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/warden-sandbox/warden/internal/guard"
	"github.com/warden-sandbox/warden/internal/guard/inject"
	"github.com/warden-sandbox/warden/internal/guard/pii"
	"github.com/warden-sandbox/warden/internal/guard/secrets"
)

// The guard stage (docs/guardrails.md): after the rules, for actions whose
// content it can see, it runs the detectors a policy's guard section names
// and blocks, masks, flags or holds the action for approval. Findings
// (detector, kind, where) go with the decision into the audit record; the
// matched value never does. Without a guard section for an action's target
// nothing is scanned.

// GuardAction is what a guard does when its detectors find something.
type GuardAction string

// The guard actions.
const (
	// GuardBlock refuses the action, naming the detector and the kind.
	GuardBlock GuardAction = "block"
	// GuardMask replaces the findings' spans with "[REDACTED:<kind>]"
	// where the door can rewrite the payload (file.write, mcp.call,
	// mcp.result); elsewhere (exec, code.run) the action is refused.
	GuardMask GuardAction = "mask"
	// GuardFlag lets the action through and records the findings (the
	// decision is log_only).
	GuardFlag GuardAction = "flag"
	// GuardApproval holds the action for approval as a rule does; a
	// result (mcp.result) cannot wait and is refused.
	GuardApproval GuardAction = "require_approval"
)

// Guard targets: what content a guard screens.
const (
	GuardTargetExec      = "exec"       // the command line (argv) and the values of its environment
	GuardTargetFileWrite = "file.write" // the body written (its first MaxGuardBody bytes)
	GuardTargetCodeRun   = "code.run"   // the code
	GuardTargetMCPCall   = "mcp.call"   // a tool call's arguments (before the call)
	GuardTargetMCPResult = "mcp.result" // a tool call's result (Engine.Screen)
)

// GuardTargetMemory screens the text written to an agent's memory
// (memory.write; mask stores it masked).
const GuardTargetMemory = "memory.write"

// LLM gateway targets (docs/llm.md): llm.prompt screens an llm.call's
// request body (the messages, input, system prompt and tool definitions
// the provider would see; mask rewrites it, the JSON staying valid) before
// the call; llm.response screens the provider's answer after it
// (Engine.Screen): a whole answer can be blocked or masked, a stream only
// screened at its end and its findings recorded.
const (
	GuardTargetLLMPrompt   = "llm.prompt"
	GuardTargetLLMResponse = "llm.response"
)

// Guard detectors.
const (
	DetectorSecrets   = secrets.ID // "secrets"
	DetectorPII       = pii.ID     // "pii"
	DetectorInjection = inject.ID  // "injection"
)

// MaxGuardBody is how much of a written file's body the guard screens:
// a door hands the guard at most this many bytes, and a body over it is
// screened by its first MaxGuardBody bytes only (mask then refuses it,
// as the rest could not be masked).
const MaxGuardBody = 8 << 20

var (
	guardTargets = []string{GuardTargetExec, GuardTargetFileWrite, GuardTargetCodeRun, GuardTargetMCPCall, GuardTargetMCPResult, GuardTargetMemory,
		GuardTargetLLMPrompt, GuardTargetLLMResponse}
	guardDetectors = []string{DetectorSecrets, DetectorPII, DetectorInjection}
)

// Guard is a policy's guard section.
type Guard struct {
	// Detectors to run: secrets, pii, injection (at least one).
	Detectors []string `json:"detectors" yaml:"detectors"`
	// Targets it screens: exec, file.write, code.run, mcp.call (tool
	// arguments), mcp.result (tool results), memory.write; empty means
	// all of them.
	Targets []string `json:"targets,omitempty" yaml:"targets,omitempty"`
	// Thresholds are per-detector minimum confidences in (0, 1]; a
	// finding below its detector's threshold is ignored.
	Thresholds map[string]float64 `json:"thresholds,omitempty" yaml:"thresholds,omitempty"`
	// Action is block, mask, flag or require_approval.
	Action GuardAction `json:"action" yaml:"action"`
	// Message is added to what a refused caller sees.
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

// GuardFinding is one finding of the guard stage, as decisions and audit
// records carry it: never the matched value.
type GuardFinding struct {
	Detector string `json:"detector"`
	Kind     string `json:"kind"`
	// Target is what was screened (GuardTarget*); Where is the part of it:
	// "argv", "env.NAME", "code", "body", or the JSON path of the string
	// in tool arguments or a result ("arguments.query", "result.content[0].text").
	Target string `json:"target"`
	Where  string `json:"where,omitempty"`
	// Start and End are byte offsets within Where's content.
	Start      int     `json:"start"`
	End        int     `json:"end"`
	Confidence float64 `json:"confidence"`
	// PolicyID is the policy whose guard reported it.
	PolicyID string `json:"policy_id,omitempty"`
	// Action is that guard's action.
	Action GuardAction `json:"action,omitempty"`
}

// Payload is content a door lets the guard see that is no attribute of the
// action (so neither rules nor the audit record see it).
type Payload struct {
	// Body is a file write's body: at most MaxGuardBody bytes.
	Body []byte
	// Truncated says the body is longer than Body.
	Truncated bool
	// Env is the environment of an exec.
	Env map[string]string
}

func (g *Guard) validate(errs []string) []string {
	if len(g.Detectors) == 0 {
		errs = append(errs, "guard: detectors: name at least one of secrets, pii, injection")
	}
	for _, d := range g.Detectors {
		if !slices.Contains(guardDetectors, d) {
			errs = append(errs, fmt.Sprintf("guard: unknown detector %q: want secrets, pii or injection", d))
		}
	}
	for _, t := range g.Targets {
		if !slices.Contains(guardTargets, t) {
			errs = append(errs, fmt.Sprintf("guard: unknown target %q: want exec, file.write, code.run, mcp.call, mcp.result, memory.write, llm.prompt or llm.response", t))
		}
	}
	for _, d := range slices.Sorted(maps.Keys(g.Thresholds)) {
		v := g.Thresholds[d]
		if !slices.Contains(g.Detectors, d) {
			errs = append(errs, fmt.Sprintf("guard: threshold for %q, which is not among the detectors", d))
		}
		if !(v > 0 && v <= 1) {
			errs = append(errs, fmt.Sprintf("guard: threshold for %s: %v is not in (0, 1]", d, v))
		}
	}
	switch g.Action {
	case GuardBlock, GuardFlag:
	case GuardMask:
		for _, t := range g.Targets {
			if t == GuardTargetExec || t == GuardTargetCodeRun {
				errs = append(errs, fmt.Sprintf("guard: action mask cannot apply to %s (the door cannot rewrite it); use block", t))
			}
		}
	case GuardApproval:
		if slices.Contains(g.Targets, GuardTargetMCPResult) {
			errs = append(errs, "guard: action require_approval cannot apply to mcp.result (a result cannot wait); use block")
		}
		if slices.Contains(g.Targets, GuardTargetLLMResponse) {
			errs = append(errs, "guard: action require_approval cannot apply to llm.response (a response cannot wait); use block")
		}
	default:
		errs = append(errs, fmt.Sprintf("guard: action %q: want block, mask, flag or require_approval", g.Action))
	}
	return errs
}

// appliesTo reports whether the guard screens target.
func (g *Guard) appliesTo(target string) bool {
	return len(g.Targets) == 0 || slices.Contains(g.Targets, target)
}

// compiledGuard is a policy's guard with its scanner.
type compiledGuard struct {
	*Guard
	policy *compiledPolicy
	scan   *guard.Scanner
}

func compileGuard(g *Guard, p *compiledPolicy) (*compiledGuard, error) {
	ds, err := detectors(g.Detectors)
	if err != nil {
		return nil, err
	}
	return &compiledGuard{Guard: g, policy: p, scan: guard.NewScanner(ds...)}, nil
}

var (
	injectOnce sync.Once
	injectDet  *inject.Detector
)

// detectors returns the named built-in detectors (shared instances).
func detectors(names []string) ([]guard.Detector, error) {
	var out []guard.Detector
	for _, n := range names {
		switch n {
		case DetectorSecrets:
			d, err := secrets.Default()
			if err != nil {
				return nil, fmt.Errorf("guard: secrets detector: %w", err)
			}
			out = append(out, d)
		case DetectorPII:
			out = append(out, pii.New())
		case DetectorInjection:
			injectOnce.Do(func() { injectDet = inject.New(inject.Options{}) })
			out = append(out, injectDet)
		default:
			return nil, fmt.Errorf("%w: guard: unknown detector %q", ErrInvalidPolicy, n)
		}
	}
	return out, nil
}

// GuardScan runs detectors (all built-in ones when none are named) over
// data, as JSON when asJSON (an error if it is not), else as text (which
// is still decoded: JSON, base64, escapes): the guard test of the API.
// Findings carry no value.
func GuardScan(data []byte, asJSON bool, names []string) ([]GuardFinding, error) {
	s, err := namedScanner(names)
	if err != nil {
		return nil, err
	}
	var fs []guard.Finding
	if asJSON {
		if fs, err = s.InspectJSON(data); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
		}
	} else {
		fs = s.Inspect(string(data))
	}
	return guardFindings(fs), nil
}

// namedScanner is a scanner of the named built-in detectors (all when none
// are named).
func namedScanner(names []string) (*guard.Scanner, error) {
	if len(names) == 0 {
		names = guardDetectors
	}
	for _, n := range names {
		if !slices.Contains(guardDetectors, n) {
			return nil, fmt.Errorf("%w: unknown detector %q: want secrets, pii or injection", ErrInvalidPolicy, n)
		}
	}
	ds, err := detectors(names)
	if err != nil {
		return nil, err
	}
	return guard.NewScanner(ds...), nil
}

// guardFindings are fs without their values.
func guardFindings(fs []guard.Finding) []GuardFinding {
	out := make([]GuardFinding, 0, len(fs))
	for _, f := range fs {
		out = append(out, GuardFinding{Detector: f.Detector, Kind: f.Kind, Where: f.Path,
			Start: f.Start, End: f.End, Confidence: f.Confidence})
	}
	return out
}

// guardTarget is the guard target of an action before it runs ("" for
// kinds the guard does not screen).
func guardTarget(k Kind) string {
	switch k {
	case KindExec, KindPTY:
		return GuardTargetExec
	case KindFileWrite:
		return GuardTargetFileWrite
	case KindCodeRun:
		return GuardTargetCodeRun
	case KindMCPCall:
		return GuardTargetMCPCall
	case KindMemoryWrite:
		return GuardTargetMemory
	case KindLLMCall:
		return GuardTargetLLMPrompt
	}
	return ""
}

// Guards reports whether some policy's guard screens the actions of kind
// (or, for mcp.call, their results too), so a door knows whether to hand
// it content (a file write's body) at all.
func (e *Engine) Guards(k Kind) bool {
	gs := e.rules.Load().guards
	t := guardTarget(k)
	if t == "" {
		return false
	}
	if len(gs[t]) > 0 {
		return true
	}
	return (k == KindMCPCall && len(gs[GuardTargetMCPResult]) > 0) || (k == KindLLMCall && len(gs[GuardTargetLLMResponse]) > 0)
}

// GuardsTarget reports whether some policy's guard screens target (a
// GuardTarget* constant), so a door knows whether to collect the content
// (an LLM stream's text) at all.
func (e *Engine) GuardsTarget(target string) bool {
	return len(e.rules.Load().guards[target]) > 0
}

// piece is one part of the content screened.
type piece struct {
	where string
	data  string
	json  bool
}

// guardStage is the guard stage of Decide.
func (e *Engine) guardStage(_ context.Context, a *Action) (Decision, error) {
	t := guardTarget(a.Kind)
	if t == "" {
		return Decision{Outcome: Allow}, nil
	}
	gs := e.rules.Load().guards[t]
	if len(gs) == 0 {
		return Decision{Outcome: Allow}, nil
	}
	var pieces []piece
	truncated := false
	switch t {
	case GuardTargetExec:
		if a.Exec != nil {
			pieces = append(pieces, piece{where: "argv", data: a.Exec.Argv})
		}
		if a.Payload != nil {
			for _, k := range slices.Sorted(maps.Keys(a.Payload.Env)) {
				pieces = append(pieces, piece{where: "env." + k, data: a.Payload.Env[k]})
			}
		}
	case GuardTargetCodeRun:
		if a.Code != nil {
			pieces = append(pieces, piece{where: "code", data: a.Code.Code})
		}
	case GuardTargetLLMPrompt:
		if a.Payload != nil && len(a.Payload.Body) > 0 {
			pieces = append(pieces, piece{where: "prompt", data: string(a.Payload.Body), json: true})
		}
	case GuardTargetFileWrite, GuardTargetMemory:
		if a.Payload != nil && len(a.Payload.Body) > 0 {
			pieces = append(pieces, piece{where: "body", data: string(a.Payload.Body)})
			truncated = a.Payload.Truncated
		}
	case GuardTargetMCPCall:
		if a.MCP != nil && len(a.MCP.Arguments) > 0 {
			b, err := json.Marshal(a.MCP.Arguments)
			if err != nil {
				return Decision{Outcome: Deny, Message: "guard: tool arguments cannot be encoded"},
					fmt.Errorf("guard: encode tool arguments: %w", err)
			}
			pieces = append(pieces, piece{where: "arguments", data: string(b), json: true})
		}
	}
	d, masked := screen(a, t, gs, pieces, truncated)
	if masked != nil {
		d.Masked = []byte(masked[0])
		if t == GuardTargetMCPCall {
			// Later stages (middleware) and the door see the masked
			// arguments on the action too.
			var args map[string]any
			if err := json.Unmarshal(d.Masked, &args); err == nil {
				a.MCP.Arguments = args
			}
		}
	}
	return d, nil
}

// Screen is the guard's post-call hook: it screens a result (the JSON
// result of an mcp.call's tools/call, given the action the call was
// decided as) with the guards of the policies applying to the action
// that screen mcp.result; for an llm.call, the provider's response (its
// JSON body, or a stream's text) with those that screen llm.response. It returns the decision (deny: block; log_only:
// flag; allow, with masked set, for mask) and the masked result, nil when
// the result passes unchanged. Without such a guard it scans nothing.
func (e *Engine) Screen(_ context.Context, a *Action, result []byte) (Decision, []byte, error) {
	target, where := GuardTargetMCPResult, "result"
	switch a.Kind {
	case KindMCPCall:
	case KindLLMCall:
		target, where = GuardTargetLLMResponse, "response"
	default:
		return Decision{Outcome: Deny, Stage: "guard", Message: "guard: only mcp.call and llm.call results are screened"},
			nil, fmt.Errorf("screen %q: %w", a.Kind, ErrUnknownKind)
	}
	gs := e.rules.Load().guards[target]
	if len(gs) == 0 || len(result) == 0 {
		return Decision{Outcome: Allow, Stage: "guard"}, nil, nil
	}
	p := piece{where: where, data: string(result), json: json.Valid(result)}
	d, masked := screen(a, target, gs, []piece{p}, false)
	d.Stage = "guard"
	if d.Outcome == RequireApproval { // validated away; refuse if it happens
		d.Outcome = Deny
	}
	if masked != nil {
		return d, []byte(masked[0]), nil
	}
	return d, nil, nil
}

// screen runs the guards that apply to a over the pieces and decides: the
// strictest action of a guard that found something wins (block, then
// require_approval, then mask, then flag). masked holds the masked pieces
// (same order) when a mask guard fired and the target can be rewritten.
func screen(a *Action, target string, gs []*compiledGuard, pieces []piece, truncated bool) (Decision, []string) {
	var all []GuardFinding
	var fired *compiledGuard
	var maskFindings = make([][]guard.Finding, len(pieces))
	masking := false
	for _, g := range gs {
		if !g.policy.covers(a) {
			continue
		}
		hit := false
		for i, p := range pieces {
			var fs []guard.Finding
			if p.json {
				var err error
				if fs, err = g.scan.InspectJSON([]byte(p.data)); err != nil {
					fs = g.scan.Inspect(p.data)
				}
			} else {
				fs = g.scan.Inspect(p.data)
			}
			for _, f := range fs {
				if th, ok := g.Thresholds[f.Detector]; ok && f.Confidence < th {
					continue
				}
				hit = true
				where := p.where
				if f.Path != "" {
					where += "." + f.Path
				}
				all = append(all, GuardFinding{Detector: f.Detector, Kind: f.Kind, Target: target, Where: where,
					Start: f.Start, End: f.End, Confidence: f.Confidence, PolicyID: g.policy.ID, Action: g.Action})
				if g.Action == GuardMask {
					maskFindings[i] = append(maskFindings[i], f)
				}
			}
		}
		if !hit {
			continue
		}
		if g.Action == GuardMask {
			masking = true
		}
		if fired == nil || guardStrictness(g.Action) > guardStrictness(fired.Action) {
			fired = g
		}
	}
	if fired == nil {
		return Decision{Outcome: Allow}, nil
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Where < all[j].Where })
	d := Decision{PolicyID: fired.policy.ID, PolicyVersion: fired.policy.Version, Findings: all}
	first := all[0]
	for _, f := range all {
		if f.PolicyID == fired.policy.ID {
			first = f
			break
		}
	}
	what := fmt.Sprintf("guard of policy %s: %s detector found %s in %s %s", fired.policy.ID, first.Detector,
		first.Kind, target, first.Where)
	if n := len(all); n > 1 {
		what += fmt.Sprintf(" (%d findings)", n)
	}
	if fired.Message != "" {
		what += ": " + fired.Message
	}
	switch fired.Action {
	case GuardBlock:
		d.Outcome, d.Message = Deny, what
	case GuardApproval:
		d.Outcome, d.Message = RequireApproval, what
	case GuardFlag:
		d.Outcome, d.Message = LogOnly, what
	case GuardMask:
		switch {
		case target == GuardTargetExec || target == GuardTargetCodeRun:
			d.Outcome, d.Message = Deny, what+"; "+target+" cannot be masked, so it is refused"
		case truncated:
			d.Outcome, d.Message = Deny, what+fmt.Sprintf("; the body is over %d MiB and cannot be masked whole, so it is refused", MaxGuardBody>>20)
		default:
			d.Outcome, d.Message = Allow, what+" (masked)"
		}
	}
	if !masking || d.Outcome != Allow {
		return d, nil
	}
	masked := make([]string, len(pieces))
	for i, p := range pieces {
		masked[i] = guard.Mask(p.data, maskFindings[i])
	}
	return d, masked
}

func guardStrictness(a GuardAction) int {
	switch a {
	case GuardBlock:
		return 3
	case GuardApproval:
		return 2
	case GuardMask:
		return 1
	}
	return 0
}

// guardsByTarget indexes the policies' guards by target.
func guardsByTarget(ps []*compiledPolicy) map[string][]*compiledGuard {
	m := map[string][]*compiledGuard{}
	for _, p := range ps {
		if p.guard == nil {
			continue
		}
		for _, t := range guardTargets {
			if p.guard.appliesTo(t) {
				m[t] = append(m[t], p.guard)
			}
		}
	}
	return m
}

// foundValues returns the values the guard found in an action's recorded
// attributes (the command line, the code) or its environment, with their
// kinds: what an audit event must not hold.
func foundValues(a *Action, d Decision) map[string]string {
	var out map[string]string
	for _, f := range d.Findings {
		var src string
		switch {
		case f.Where == "argv" && a.Exec != nil:
			src = a.Exec.Argv
		case f.Where == "code" && a.Code != nil:
			src = a.Code.Code
		case strings.HasPrefix(f.Where, "env.") && a.Payload != nil:
			src = a.Payload.Env[strings.TrimPrefix(f.Where, "env.")]
		default:
			continue
		}
		if f.Start < 0 || f.End > len(src) || f.Start >= f.End {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[src[f.Start:f.End]] = f.Kind
	}
	return out
}

// scrubFound replaces, in an audit event's encoded detail, every value the
// guard found in the governed actions (in the door's own detail, such as
// the command line, as in the recorded action) with "[REDACTED:<kind>]".
func scrubFound(b []byte, governed []Decided) []byte {
	for _, g := range governed {
		if len(g.Decision.Findings) == 0 || g.Action == nil {
			continue
		}
		vals := foundValues(g.Action, g.Decision)
		// Longest first, so a value holding another is replaced whole.
		keys := slices.SortedFunc(maps.Keys(vals), func(x, y string) int { return len(y) - len(x) })
		for _, v := range keys {
			enc, err := json.Marshal(v)
			if err != nil || len(enc) < 3 {
				continue
			}
			m, _ := json.Marshal(guardMarker(vals[v]))
			b = bytes.ReplaceAll(b, enc[1:len(enc)-1], m[1:len(m)-1])
		}
	}
	return b
}

func guardMarker(kind string) string {
	return guard.Mask(kind, []guard.Finding{{Kind: kind, Start: 0, End: len(kind)}})
}
