package seccomp

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/elastic/go-seccomp-bpf/arch"
)

//go:embed policy.json
var policyJSON []byte

// Action is a seccomp filter return value (SECCOMP_RET_*), data included.
type Action uint32

// String renders the action the way policy.json spells it.
func (a Action) String() string {
	switch {
	case a == retAllow:
		return "allow"
	case a == retLog:
		return "log"
	case a == retKillProcess:
		return "kill_process"
	case a&^retDataMask == retErrno:
		n := uint32(a & retDataMask)
		for name, v := range errnoNames {
			if v == n {
				return "errno:" + name
			}
		}
		return "errno:" + strconv.FormatUint(uint64(n), 10)
	default:
		return fmt.Sprintf("action:%#08x", uint32(a))
	}
}

func parseAction(s string) (Action, error) {
	switch s {
	case "allow":
		return retAllow, nil
	case "log":
		return retLog, nil
	case "kill_process":
		return retKillProcess, nil
	}
	name, ok := strings.CutPrefix(s, "errno:")
	if !ok {
		return 0, fmt.Errorf("unknown action %q (want allow, log, kill_process or errno:NAME)", s)
	}
	n, known := errnoNames[name]
	if !known {
		v, err := strconv.ParseUint(name, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("unknown errno in action %q", s)
		}
		n = uint32(v)
	}
	if n == 0 || n > 4095 {
		return 0, fmt.Errorf("errno out of range in action %q", s)
	}
	return Action(retErrno | n), nil
}

// allows reports whether the action lets the syscall run.
func (a Action) allows() bool { return a == retAllow || a == retLog }

// Op is an argument comparison.
type Op string

// Comparisons a condition can make.
const (
	// OpEq matches when the full 64-bit argument equals Value.
	OpEq Op = "eq"
	// OpMaskedEq matches when arg & Mask == Value (libseccomp's
	// SCMP_CMP_MASKED_EQ). Use mask U32_MASK for arguments the kernel reads
	// as 32-bit ints, so high bits cannot be used to dodge a deny rule.
	OpMaskedEq Op = "masked_eq"
)

// Cond is one argument comparison.
type Cond struct {
	Arg   uint32 // argument index, 0..5
	Op    Op
	Mask  uint64 // OpMaskedEq only
	Value uint64
}

// Rule is one policy entry: either an unconditional list of syscalls, or one
// syscall whose arguments must match at least one condition set (each set is
// a conjunction).
type Rule struct {
	Comment string
	Action  Action
	Names   []string // unconditional form
	Syscall string   // conditional form
	AnyOf   [][]Cond // conditional form, after expanding "values" lists
}

// syscalls lists the syscall names the rule covers.
func (r Rule) syscalls() []string {
	if r.Syscall != "" {
		return []string{r.Syscall}
	}
	return r.Names
}

// label names the rule in errors: its syscall, or its first name and a count.
func (r Rule) label() string {
	names := r.syscalls()
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%s and %d more", names[0], len(names)-1)
}

// Policy is the parsed, validated syscall policy.
type Policy struct {
	Arch                 string
	DefaultAction        Action
	ForeignArchAction    Action
	X32Action            Action
	UnknownSyscallAction Action
	KnownMaxSyscall      uint32
	Rules                []Rule
	NeverAllow           []string
}

// Load parses and validates the embedded policy.json.
func Load() (*Policy, error) {
	p, err := Parse(policyJSON)
	if err != nil {
		return nil, fmt.Errorf("embedded policy.json: %w", err)
	}
	return p, nil
}

// Parse parses and validates a policy in policy.json's format.
func Parse(data []byte) (*Policy, error) {
	var raw rawPolicy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("seccomp: decode policy: %w", err)
	}
	if dec.More() {
		return nil, errors.New("seccomp: decode policy: trailing data")
	}
	p, err := raw.build()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return p, nil
}

// archInfo returns go-seccomp-bpf's table for the policy's architecture.
// go-seccomp-bpf assembles for the running architecture only, so the policy
// can only be assembled on a matching GOARCH.
func (p *Policy) archInfo() (*arch.Info, error) {
	if p.Arch != "x86_64" {
		return nil, fmt.Errorf("unsupported policy arch %q", p.Arch)
	}
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("policy is for x86_64, running on %s: %w", runtime.GOARCH, errors.ErrUnsupported)
	}
	return arch.X86_64, nil
}

func (p *Policy) validate() error {
	if p.Arch != "x86_64" {
		return fmt.Errorf("unsupported policy arch %q", p.Arch)
	}
	// Use the x86_64 table directly so the policy validates on any host.
	tbl := arch.X86_64
	for what, a := range map[string]Action{
		"default_action":         p.DefaultAction,
		"foreign_arch_action":    p.ForeignArchAction,
		"x32_action":             p.X32Action,
		"unknown_syscall_action": p.UnknownSyscallAction,
	} {
		if a.allows() {
			return fmt.Errorf("%s must deny, not %v", what, a)
		}
	}
	maxNr := 0
	for nr := range tbl.SyscallNumbers {
		maxNr = max(maxNr, nr)
	}
	if p.KnownMaxSyscall == 0 || int(p.KnownMaxSyscall) > maxNr {
		return fmt.Errorf("known_max_syscall %d outside the x86_64 table (max %d)", p.KnownMaxSyscall, maxNr)
	}
	lookup := func(name string) error {
		nr, ok := tbl.SyscallNames[name]
		if !ok {
			return fmt.Errorf("unknown x86_64 syscall %q", name)
		}
		if nr > int(p.KnownMaxSyscall) {
			return fmt.Errorf("syscall %q (nr %d) is above known_max_syscall %d", name, nr, p.KnownMaxSyscall)
		}
		return nil
	}
	never := map[string]bool{}
	for _, name := range p.NeverAllow {
		if err := lookup(name); err != nil {
			return fmt.Errorf("never_allow: %w", err)
		}
		never[name] = true
	}
	if len(p.Rules) == 0 {
		return errors.New("no rules")
	}
	decided := map[string]int{} // syscall -> index of the unconditional rule that decides it
	for i, r := range p.Rules {
		if r.Action == retSentinel {
			return fmt.Errorf("rule %d: reserved action", i)
		}
		switch {
		case r.Syscall != "" && len(r.Names) > 0:
			return fmt.Errorf("rule %d: has both names and syscall", i)
		case r.Syscall == "" && len(r.Names) == 0:
			return fmt.Errorf("rule %d: has neither names nor syscall", i)
		case r.Syscall != "" && len(r.AnyOf) == 0:
			return fmt.Errorf("rule %d (%s): conditional rule without any_of", i, r.Syscall)
		case r.Syscall == "" && len(r.AnyOf) > 0:
			return fmt.Errorf("rule %d: any_of needs syscall, not names", i)
		}
		for _, name := range r.syscalls() {
			if err := lookup(name); err != nil {
				return fmt.Errorf("rule %d: %w", i, err)
			}
			if j, ok := decided[name]; ok {
				return fmt.Errorf("rule %d: %s is unreachable, rule %d already decides it", i, name, j)
			}
			if r.Action.allows() && never[name] {
				return fmt.Errorf("rule %d: %s is in never_allow but the rule is %v", i, name, r.Action)
			}
			if r.Syscall == "" {
				decided[name] = i
			}
		}
		for _, set := range r.AnyOf {
			if len(set) == 0 {
				return fmt.Errorf("rule %d (%s): empty condition set", i, r.Syscall)
			}
			for _, c := range set {
				if err := c.validate(); err != nil {
					return fmt.Errorf("rule %d (%s): %w", i, r.Syscall, err)
				}
			}
		}
	}
	return nil
}

func (c Cond) validate() error {
	if c.Arg > 5 {
		return fmt.Errorf("argument index %d out of range", c.Arg)
	}
	switch c.Op {
	case OpEq:
		if c.Mask != 0 {
			return errors.New("eq takes no mask")
		}
	case OpMaskedEq:
		if c.Mask == 0 {
			return errors.New("masked_eq needs a non-zero mask")
		}
		if c.Value&^c.Mask != 0 {
			return fmt.Errorf("masked_eq value %#x has bits outside mask %#x", c.Value, c.Mask)
		}
	default:
		return fmt.Errorf("unknown op %q", c.Op)
	}
	return nil
}

// rawPolicy is policy.json as written.
type rawPolicy struct {
	Comment              []string  `json:"comment"`
	Arch                 string    `json:"arch"`
	DefaultAction        string    `json:"default_action"`
	ForeignArchAction    string    `json:"foreign_arch_action"`
	X32Action            string    `json:"x32_action"`
	KnownMaxSyscall      uint32    `json:"known_max_syscall"`
	UnknownSyscallAction string    `json:"unknown_syscall_action"`
	Rules                []rawRule `json:"rules"`
	NeverAllow           []string  `json:"never_allow"`
}

type rawRule struct {
	Comment string   `json:"comment"`
	Action  string   `json:"action"`
	Names   []string `json:"names"`
	Syscall string   `json:"syscall"`
	AnyOf   []rawSet `json:"any_of"`
}

type rawSet struct {
	Args []rawCond `json:"args"`
}

type rawCond struct {
	Arg    *uint32 `json:"arg"`
	Op     Op      `json:"op"`
	Mask   *value  `json:"mask"`
	Value  *value  `json:"value"`
	Values []value `json:"values"`
}

// value is an argument value: a JSON number, or a string holding a number
// ("0x5412") or symbols from constants.go joined with '|'.
type value uint64

func (v *value) UnmarshalJSON(b []byte) error {
	var n uint64
	if err := json.Unmarshal(b, &n); err == nil {
		*v = value(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("value %s: want a number or a string", b)
	}
	var out uint64
	for part := range strings.SplitSeq(s, "|") {
		part = strings.TrimSpace(part)
		if n, ok := symbols[part]; ok {
			out |= n
			continue
		}
		n, err := strconv.ParseUint(part, 0, 64)
		if err != nil {
			return fmt.Errorf("value %q: unknown symbol or number %q", s, part)
		}
		out |= n
	}
	*v = value(out)
	return nil
}

func (raw *rawPolicy) build() (*Policy, error) {
	p := &Policy{
		Arch:            raw.Arch,
		KnownMaxSyscall: raw.KnownMaxSyscall,
		NeverAllow:      raw.NeverAllow,
	}
	for _, a := range []struct {
		dst  *Action
		name string
		src  string
	}{
		{&p.DefaultAction, "default_action", raw.DefaultAction},
		{&p.ForeignArchAction, "foreign_arch_action", raw.ForeignArchAction},
		{&p.X32Action, "x32_action", raw.X32Action},
		{&p.UnknownSyscallAction, "unknown_syscall_action", raw.UnknownSyscallAction},
	} {
		act, err := parseAction(a.src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		*a.dst = act
	}
	for i, rr := range raw.Rules {
		act, err := parseAction(rr.Action)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		r := Rule{Comment: rr.Comment, Action: act, Names: rr.Names, Syscall: rr.Syscall}
		for _, rs := range rr.AnyOf {
			sets, err := rs.expand()
			if err != nil {
				return nil, fmt.Errorf("rule %d (%s): %w", i, rr.Syscall, err)
			}
			r.AnyOf = append(r.AnyOf, sets...)
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}

// expand turns a set whose conditions may list several values into the
// cartesian product of plain condition sets.
func (rs rawSet) expand() ([][]Cond, error) {
	sets := [][]Cond{nil}
	for _, rc := range rs.Args {
		if rc.Arg == nil {
			return nil, errors.New("condition without arg")
		}
		if (rc.Value == nil) == (len(rc.Values) == 0) {
			return nil, fmt.Errorf("arg %d: need exactly one of value and values", *rc.Arg)
		}
		vals := rc.Values
		if rc.Value != nil {
			vals = []value{*rc.Value}
		}
		var mask uint64
		if rc.Mask != nil {
			mask = uint64(*rc.Mask)
		}
		var next [][]Cond
		for _, s := range sets {
			for _, v := range vals {
				c := Cond{Arg: *rc.Arg, Op: rc.Op, Mask: mask, Value: uint64(v)}
				next = append(next, append(slices.Clone(s), c))
			}
		}
		sets = next
	}
	return sets, nil
}

// matches evaluates the condition against an argument value; it is the
// reference semantics the assembled BPF is tested against.
func (c Cond) matches(arg uint64) bool {
	switch c.Op {
	case OpEq:
		return arg == c.Value
	case OpMaskedEq:
		return arg&c.Mask == c.Value
	}
	return false
}

// Evaluate returns the action the policy takes for a native (x86_64) syscall,
// computed from the rules directly rather than from the BPF program. Tests
// compare it with the assembled filter.
func (p *Policy) Evaluate(nr uint32, args [6]uint64) Action {
	switch {
	case nr >= x32SyscallBit:
		return p.X32Action
	case nr > p.KnownMaxSyscall:
		return p.UnknownSyscallAction
	}
	name := arch.X86_64.SyscallNumbers[int(nr)]
	for _, r := range p.Rules {
		if r.Syscall == "" {
			if name != "" && slices.Contains(r.Names, name) {
				return r.Action
			}
			continue
		}
		if r.Syscall != name {
			continue
		}
		for _, set := range r.AnyOf {
			if !slices.ContainsFunc(set, func(c Cond) bool { return !c.matches(args[c.Arg]) }) {
				return r.Action
			}
		}
	}
	return p.DefaultAction
}
