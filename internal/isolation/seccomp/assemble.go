package seccomp

import (
	"fmt"
	"io"
	"math/bits"
	"strings"

	elastic "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// maxInstructions is the kernel's BPF_MAXINSNS.
const maxInstructions = 4096

// Assemble compiles the policy into the classic BPF program that the kernel
// loads.
func (p *Policy) Assemble() ([]bpf.RawInstruction, error) {
	prog, err := p.Instructions()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: encode program: %w", err)
	}
	return raw, nil
}

// Instructions compiles the policy into symbolic BPF instructions.
func (p *Policy) Instructions() ([]bpf.Instruction, error) {
	prog, _, err := p.link()
	return prog, err
}

// segment is where a rule's code starts in the linked program.
type segment struct {
	start int
	rule  int
}

// link assembles each rule with go-seccomp-bpf and joins the pieces behind
// this package's prologue:
//
//	ld [arch]; jeq AUDIT_ARCH_X86_64 ? next : ret foreign_arch_action
//	ld [nr];   jge 0x40000000 ? ret x32_action : next
//	           jgt known_max_syscall ? ret unknown_syscall_action : next
//	rule 0 ... ld [nr]
//	rule 1 ... ld [nr]
//	...
//	ret default_action
//
// Each rule is assembled as a one-group go-seccomp-bpf policy whose default
// action is a sentinel. Its prologue is checked and dropped, and every
// "return sentinel" (no match) becomes a jump to the rule's last instruction,
// which becomes a reload of the syscall number so the next rule compares the
// number and not a leftover argument. Jumps are relative and go-seccomp-bpf
// only jumps forward, so a rule's code stays valid wherever it is placed.
func (p *Policy) link() ([]bpf.Instruction, []segment, error) {
	info, err := p.archInfo()
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: %w", err)
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(p.ForeignArchAction)},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
		bpf.RetConstant{Val: uint32(p.X32Action)},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: p.KnownMaxSyscall, SkipFalse: 1},
		bpf.RetConstant{Val: uint32(p.UnknownSyscallAction)},
	}
	var segs []segment
	for i, r := range p.Rules {
		body, err := assembleRule(r, uint32(info.ID))
		if err != nil {
			return nil, nil, fmt.Errorf("seccomp: rule %d (%s): %w", i, r.label(), err)
		}
		segs = append(segs, segment{start: len(prog), rule: i})
		prog = append(prog, body...)
	}
	prog = append(prog, bpf.RetConstant{Val: uint32(p.DefaultAction)})
	if err := checkJumps(prog); err != nil {
		return nil, nil, fmt.Errorf("seccomp: %w", err)
	}
	if len(prog) > maxInstructions {
		return nil, nil, fmt.Errorf("seccomp: program has %d instructions, the kernel takes at most %d", len(prog), maxInstructions)
	}
	return prog, segs, nil
}

// assembleRule returns the rule's code with go-seccomp-bpf's prologue removed.
// Falling off its end (its last instruction reloads the syscall number) means
// "no match".
func assembleRule(r Rule, archID uint32) ([]bpf.Instruction, error) {
	group := elastic.SyscallGroup{Action: elastic.Action(r.Action)}
	if r.Syscall == "" {
		group.Names = r.Names
	}
	for _, set := range r.AnyOf {
		nc := elastic.NameWithConditions{Name: r.Syscall}
		for _, c := range set {
			nc.Conditions = append(nc.Conditions, expandCond(c)...)
		}
		group.NamesWithCondtions = append(group.NamesWithCondtions, nc)
	}
	pol := elastic.Policy{DefaultAction: elastic.ActionTrace, Syscalls: []elastic.SyscallGroup{group}}
	ins, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("go-seccomp-bpf: %w", err)
	}
	n, err := elasticPrologueLen(ins, archID)
	if err != nil {
		return nil, err
	}
	body := ins[n:]
	last := len(body) - 1
	for i, in := range body {
		if _, ok := in.(bpf.Jump); ok {
			// go-seccomp-bpf v1.6.0 miscomputes long unconditional jumps
			// (they can point backwards); none are expected in one rule.
			return nil, fmt.Errorf("go-seccomp-bpf emitted a long jump at %d; split the rule", i)
		}
		ret, ok := in.(bpf.RetConstant)
		if !ok || ret.Val != retSentinel {
			continue
		}
		if i == last {
			body[i] = bpf.LoadAbsolute{Off: offNr, Size: 4}
		} else {
			body[i] = bpf.Jump{Skip: uint32(last - i - 1)}
		}
	}
	return body, nil
}

// checkJumps verifies that every jump lands inside the program and that the
// program ends with a return, as the kernel's checker will.
func checkJumps(prog []bpf.Instruction) error {
	for i, in := range prog {
		var targets []int
		switch in := in.(type) {
		case bpf.JumpIf:
			targets = []int{i + 1 + int(in.SkipTrue), i + 1 + int(in.SkipFalse)}
		case bpf.Jump:
			targets = []int{i + 1 + int(in.Skip)}
		}
		for _, t := range targets {
			if t >= len(prog) {
				return fmt.Errorf("instruction %d jumps out of the program (to %d of %d)", i, t, len(prog))
			}
		}
	}
	if _, ok := prog[len(prog)-1].(bpf.RetConstant); !ok {
		return fmt.Errorf("program does not end with a return")
	}
	return nil
}

// elasticPrologueLen checks that ins starts with the prologue go-seccomp-bpf
// v1.6.0 emits (arch check jumping to the final sentinel return, syscall
// number load, x32 check) and returns its length. Any other shape is an error:
// a library change must be reviewed before it reaches a filter.
func elasticPrologueLen(ins []bpf.Instruction, archID uint32) (int, error) {
	if len(ins) < 7 {
		return 0, fmt.Errorf("go-seccomp-bpf program too short (%d instructions)", len(ins))
	}
	if ret, ok := ins[len(ins)-1].(bpf.RetConstant); !ok || ret.Val != retSentinel {
		return 0, fmt.Errorf("go-seccomp-bpf program does not end with the default action: %v", ins[len(ins)-1])
	}
	if ins[0] != (bpf.LoadAbsolute{Off: offArch, Size: 4}) {
		return 0, fmt.Errorf("unexpected go-seccomp-bpf prologue: %v", ins[0])
	}
	var n int
	j, _ := ins[1].(bpf.JumpIf)
	switch {
	case j.Cond == bpf.JumpNotEqual:
		// jne arch -> final instruction
		if j.Val != archID || j.SkipFalse != 0 || 2+int(j.SkipTrue) != len(ins)-1 {
			return 0, fmt.Errorf("unexpected go-seccomp-bpf arch check: %v", ins[1])
		}
		n = 2
	default:
		// jeq arch -> skip 1; ja final instruction
		ja, ok := ins[2].(bpf.Jump)
		if j != (bpf.JumpIf{Cond: bpf.JumpEqual, Val: archID, SkipTrue: 1}) || !ok || 3+int(ja.Skip) != len(ins)-1 {
			return 0, fmt.Errorf("unexpected go-seccomp-bpf arch check: %v %v", ins[1], ins[2])
		}
		n = 3
	}
	want := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
		bpf.RetConstant{Val: retErrno | 38},
	}
	for i, w := range want {
		if ins[n+i] != w {
			return 0, fmt.Errorf("unexpected go-seccomp-bpf prologue at %d: %v, want %v", n+i, ins[n+i], w)
		}
	}
	return n + len(want), nil
}

// expandCond turns one condition into go-seccomp-bpf conditions (a
// conjunction). masked_eq becomes one BitsSet per bit of the value plus one
// BitsNotSet for the rest of the mask: go-seccomp-bpf's BitsSet means "any of
// these bits", so each bit gets its own condition.
func expandCond(c Cond) []elastic.Condition {
	switch c.Op {
	case OpEq:
		return []elastic.Condition{{Argument: c.Arg, Operation: elastic.Equal, Value: c.Value}}
	case OpMaskedEq:
		var out []elastic.Condition
		for v := c.Value; v != 0; v &= v - 1 {
			out = append(out, elastic.Condition{Argument: c.Arg, Operation: elastic.BitsSet, Value: 1 << bits.TrailingZeros64(v)})
		}
		if rest := c.Mask &^ c.Value; rest != 0 {
			out = append(out, elastic.Condition{Argument: c.Arg, Operation: elastic.BitsNotSet, Value: rest})
		}
		return out
	}
	return nil
}

// Render writes a deterministic, annotated listing of the assembled program:
// absolute jump targets, syscall names for syscall-number comparisons, and the
// rule each block of code comes from. testdata/filter.golden holds it.
func (p *Policy) Render(w io.Writer) error {
	prog, segs, err := p.link()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %d instructions; default %v, foreign arch %v, x32 %v, nr > %d %v\n",
		len(prog), p.DefaultAction, p.ForeignArchAction, p.X32Action, p.KnownMaxSyscall, p.UnknownSyscallAction)
	next := 0
	loaded := "" // what the accumulator holds, following program order
	for i, in := range prog {
		if next < len(segs) && segs[next].start == i {
			r := p.Rules[segs[next].rule]
			names := r.syscalls()
			desc := strings.Join(names, " ")
			if len(names) > 4 {
				desc = fmt.Sprintf("%d syscalls, %s ... %s", len(names), names[0], names[len(names)-1])
			}
			fmt.Fprintf(&b, "# rule %d: %v %s", segs[next].rule, r.Action, desc)
			if len(r.AnyOf) > 0 {
				fmt.Fprintf(&b, " (%d condition sets)", len(r.AnyOf))
			}
			b.WriteString("\n")
			next++
		}
		text, note := renderInstruction(i, in, &loaded)
		if note != "" {
			fmt.Fprintf(&b, "%4d  %-34s ; %s\n", i, text, note)
		} else {
			fmt.Fprintf(&b, "%4d  %s\n", i, text)
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

var jumpNames = map[bpf.JumpTest]string{
	bpf.JumpEqual:          "jeq",
	bpf.JumpNotEqual:       "jne",
	bpf.JumpGreaterThan:    "jgt",
	bpf.JumpLessThan:       "jlt",
	bpf.JumpGreaterOrEqual: "jge",
	bpf.JumpLessOrEqual:    "jle",
	bpf.JumpBitsSet:        "jset",
	bpf.JumpBitsNotSet:     "jnset",
}

func renderInstruction(i int, in bpf.Instruction, loaded *string) (text, note string) {
	switch in := in.(type) {
	case bpf.LoadAbsolute:
		switch off := in.Off; {
		case off == offNr:
			*loaded = "nr"
		case off == offArch:
			*loaded = "arch"
		case off >= offArgs && off < offArgs+6*8:
			half := "lo"
			if (off-offArgs)%8 == 4 {
				half = "hi"
			}
			*loaded = fmt.Sprintf("arg%d %s", (off-offArgs)/8, half)
		default:
			*loaded = "?"
		}
		return fmt.Sprintf("ld [%d]", in.Off), *loaded
	case bpf.JumpIf:
		text = fmt.Sprintf("%s #%#x jt %d jf %d", jumpNames[in.Cond], in.Val, i+1+int(in.SkipTrue), i+1+int(in.SkipFalse))
		switch *loaded {
		case "nr":
			if name, ok := arch.X86_64.SyscallNumbers[int(in.Val)]; ok && (in.Cond == bpf.JumpEqual || in.Cond == bpf.JumpNotEqual) {
				note = name
			}
		case "arch":
			if in.Val == auditArchX86_64 {
				note = "AUDIT_ARCH_X86_64"
			}
		default:
			note = *loaded
		}
		return text, note
	case bpf.Jump:
		return fmt.Sprintf("ja %d", i+1+int(in.Skip)), ""
	case bpf.RetConstant:
		return fmt.Sprintf("ret #%#08x", in.Val), Action(in.Val).String()
	default:
		return fmt.Sprintf("%v", in), "unexpected instruction"
	}
}
