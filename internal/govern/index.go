package govern

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// Prechecks: a rule's condition is usually a conjunction whose parts test
// one string attribute against a constant (exec.cmd == "rm", action on a
// host that endsWith(".internal"), argv matching a pattern). Before the
// CEL program runs, match checks those parts natively, reading the field
// straight from the action's structs: when one is false, the conjunction
// is false and the rule does not match, whatever its other parts say (CEL's
// && is false when any operand is false, even if another is an error), so
// the program is not run. A precheck that holds decides nothing: the
// program still runs and gives the answer. Only forms whose native result
// is exactly CEL's are taken:
//
//	attr == "c"  and  "c" == attr
//	attr.contains("c"), attr.startsWith("c"), attr.endsWith("c")
//	attr.matches("re")  and  matches(attr, "re")  (Go's RE2, as CEL's)
//	attr in ["a", "b"]
//	"c" in attr           (attr a list of strings)
//
// where attr is a variable's field path through plain (non-pointer)
// structs ending in a string (or list of strings) field. Anything else in
// the conjunction is left to the program.
//
// A condition's cost in CEL is a walk over an interpreted tree of
// heap objects; on a busy server, where each decision finds those trees
// out of the CPU's caches, 100 such walks cost several times what the same
// walks cost in a tight loop. A precheck is a few loads and a string
// compare (docs/benchmarks.md, "Governed path").

// precheckOp is the native test of a precheck.
type precheckOp uint8

const (
	preEq precheckOp = iota
	preContains
	prePrefix
	preSuffix
	preMatches
	preInSet
	preListHas
)

// precheck is one necessary part of a rule's condition.
type precheck struct {
	ident string // the CEL variable
	index []int  // field path in the variable's struct
	op    precheckOp
	s     string
	set   []string
	re    *regexp.Regexp
	lits  []string // literals every match of re contains
}

// test reports whether the part may be true when its field has value v.
func (p *precheck) test(v fieldVal) bool {
	if !v.ok {
		return true
	}
	if p.op == preListHas {
		if !v.list.IsValid() {
			return true
		}
		for i := range v.list.Len() {
			if v.list.Index(i).String() == p.s {
				return true
			}
		}
		return false
	}
	if v.list.IsValid() {
		return true
	}
	s := v.s
	switch p.op {
	case preEq, preContains, prePrefix, preSuffix:
		return fastTest(p.op, s, p.s)
	case preMatches:
		for _, l := range p.lits {
			if !strings.Contains(s, l) {
				return false
			}
		}
		return p.re.MatchString(s)
	case preInSet:
		return slices.Contains(p.set, s)
	}
	return true
}

// fastTest is the test of the ops a flatCheck holds inline: ==,
// contains, startsWith and endsWith of s against the constant c.
func fastTest(op precheckOp, s, c string) bool {
	switch op {
	case preEq:
		return s == c
	case preContains:
		return strings.Contains(s, c)
	case prePrefix:
		return strings.HasPrefix(s, c)
	case preSuffix:
		return strings.HasSuffix(s, c)
	}
	return true
}

// fieldVal is one field's value for an action: a string, or a list
// (list valid) of strings; ok is false when the action has no such field.
type fieldVal struct {
	s    string
	list reflect.Value
	ok   bool
}

// resolve reads the field at (ident, index) from the activation.
func resolve(act *activation, ident string, index []int) fieldVal {
	x, ok := act.ResolveName(ident)
	if !ok || x == nil {
		return fieldVal{}
	}
	v := reflect.ValueOf(x)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fieldVal{}
	}
	f := v.Elem().FieldByIndex(index)
	switch f.Kind() {
	case reflect.String:
		return fieldVal{s: f.String(), ok: true}
	case reflect.Slice:
		return fieldVal{list: f, ok: true}
	}
	return fieldVal{}
}

// preIndex is the prechecks of one kind's rules laid out for one pass per
// decision: each distinct field is read once, and the checks, in rule
// order, sit in one array with their constants in one string, so that the
// pass touches a few contiguous blocks of memory instead of every rule's
// objects (on a server, between requests, those are out of the caches).
type preIndex struct {
	n      int // rules
	fields []preField
	checks []flatCheck
}

type preField struct {
	ident string
	index []int
}

// flatCheck is a precheck of rule number rule (its position in the kind's
// evaluation order) on field number field. Only the fast forms (==,
// contains, startsWith, endsWith) are held inline; the others point to
// their precheck.
type flatCheck struct {
	rule  uint32
	field uint16
	op    precheckOp
	s     string    // the constant, a slice of one shared string
	slow  *precheck // matches, in, list membership
}

// newPreIndex indexes rules (the kind's evaluation order).
func newPreIndex(rules []*compiledRule) *preIndex {
	ix := &preIndex{n: len(rules)}
	fieldNo := map[string]int{}
	var arena strings.Builder
	type pending struct {
		flatCheck
		off, n int
	}
	var ps []pending
	for i, r := range rules {
		for _, p := range r.pre {
			key := p.ident + fmt.Sprint(p.index)
			f, ok := fieldNo[key]
			if !ok {
				f = len(ix.fields)
				fieldNo[key] = f
				ix.fields = append(ix.fields, preField{ident: p.ident, index: p.index})
			}
			c := pending{flatCheck: flatCheck{rule: uint32(i), field: uint16(f), op: p.op}}
			switch p.op {
			case preEq, preContains, prePrefix, preSuffix:
				c.off, c.n = arena.Len(), len(p.s)
				arena.WriteString(p.s)
			default:
				c.slow = p
			}
			ps = append(ps, c)
		}
	}
	all := arena.String()
	ix.checks = make([]flatCheck, len(ps))
	for i, c := range ps {
		if c.slow == nil {
			c.s = all[c.off : c.off+c.n]
		}
		ix.checks[i] = c.flatCheck
	}
	if len(ix.fields) > 1<<16-1 {
		ix.checks, ix.fields = nil, nil
	}
	return ix
}

// live returns a bitmap of the rules whose prechecks all hold for the
// action (bit i for rule i); buf is used when large enough.
func (ix *preIndex) live(act *activation, buf []uint64) []uint64 {
	words := (ix.n + 63) / 64
	if cap(buf) < words {
		buf = make([]uint64, words)
	}
	bits := buf[:words]
	for i := range bits {
		bits[i] = ^uint64(0)
	}
	if len(ix.checks) == 0 {
		return bits
	}
	var vbuf [8]fieldVal
	vals := vbuf[:0]
	if len(ix.fields) > len(vbuf) {
		vals = make([]fieldVal, 0, len(ix.fields))
	}
	for _, f := range ix.fields {
		vals = append(vals, resolve(act, f.ident, f.index))
	}
	for i := range ix.checks {
		c := &ix.checks[i]
		if bits[c.rule/64]&(1<<(c.rule%64)) == 0 {
			continue
		}
		v := vals[c.field]
		var ok bool
		switch {
		case !v.ok:
			ok = true
		case c.slow != nil:
			ok = c.slow.test(v)
		case v.list.IsValid():
			ok = true
		default:
			ok = fastTest(c.op, v.s, c.s)
		}
		if !ok {
			bits[c.rule/64] &^= 1 << (c.rule % 64)
		}
	}
	return bits
}

// varTypes maps each CEL variable to its Go struct type.
var varTypes = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for _, v := range commonVars {
		m[v.name] = v.typ
	}
	for _, k := range kindTable {
		m[k.cel] = k.typ
	}
	return m
}()

// prechecksOf returns the prechecks of a checked condition: those of its
// top-level conjuncts that have a native form.
func prechecksOf(a *cel.Ast) []*precheck {
	var out []*precheck
	var walk func(e celast.Expr)
	walk = func(e celast.Expr) {
		if e.Kind() == celast.CallKind && e.AsCall().FunctionName() == "_&&_" {
			for _, arg := range e.AsCall().Args() {
				walk(arg)
			}
			return
		}
		if p := precheckOf(e); p != nil {
			out = append(out, p)
		}
	}
	walk(a.NativeRep().Expr())
	return out
}

// precheckOf is the precheck of one conjunct, or nil.
func precheckOf(e celast.Expr) *precheck {
	if e.Kind() != celast.CallKind {
		return nil
	}
	c := e.AsCall()
	args := c.Args()
	switch fn := c.FunctionName(); fn {
	case "_==_":
		if len(args) != 2 {
			return nil
		}
		for _, ord := range [2][2]int{{0, 1}, {1, 0}} {
			if s, ok := stringLit(args[ord[1]]); ok {
				if p := fieldOf(args[ord[0]], reflect.String); p != nil {
					p.op, p.s = preEq, s
					return p
				}
			}
		}
	case "contains", "startsWith", "endsWith", "matches":
		var target, arg celast.Expr
		switch {
		case c.IsMemberFunction() && len(args) == 1:
			target, arg = c.Target(), args[0]
		case !c.IsMemberFunction() && fn == "matches" && len(args) == 2:
			target, arg = args[0], args[1]
		default:
			return nil
		}
		s, ok := stringLit(arg)
		if !ok {
			return nil
		}
		p := fieldOf(target, reflect.String)
		if p == nil {
			return nil
		}
		p.s = s
		switch fn {
		case "contains":
			p.op = preContains
		case "startsWith":
			p.op = prePrefix
		case "endsWith":
			p.op = preSuffix
		case "matches":
			re, err := regexp.Compile(s)
			if err != nil {
				return nil
			}
			p.op, p.re, p.lits = preMatches, re, requiredLiterals(s)
		}
		return p
	case "@in":
		if len(args) != 2 {
			return nil
		}
		if s, ok := stringLit(args[0]); ok {
			if p := fieldOf(args[1], reflect.Slice); p != nil {
				p.op, p.s = preListHas, s
				return p
			}
			return nil
		}
		if args[1].Kind() != celast.ListKind {
			return nil
		}
		l := args[1].AsList()
		if len(l.OptionalIndices()) > 0 {
			return nil
		}
		var set []string
		for _, el := range l.Elements() {
			s, ok := stringLit(el)
			if !ok {
				return nil
			}
			set = append(set, s)
		}
		if p := fieldOf(args[0], reflect.String); p != nil {
			p.op, p.set = preInSet, set
			return p
		}
	}
	return nil
}

// stringLit is e's value if e is a string literal.
func stringLit(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// fieldOf is a precheck (without its op) for e when e selects a field of
// kind want (a string, or a list of strings for reflect.Slice) through
// plain structs from a variable.
func fieldOf(e celast.Expr, want reflect.Kind) *precheck {
	var names []string
	for e.Kind() == celast.SelectKind {
		s := e.AsSelect()
		if s.IsTestOnly() {
			return nil
		}
		names = append(names, s.FieldName())
		e = s.Operand()
	}
	if e.Kind() != celast.IdentKind || len(names) == 0 {
		return nil
	}
	ident := e.AsIdent()
	t, ok := varTypes[ident]
	if !ok {
		return nil
	}
	var index []int
	for i := len(names) - 1; i >= 0; i-- {
		if t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := jsonField(t, names[i])
		if !ok {
			return nil
		}
		index = append(index, f.Index...)
		t = f.Type
	}
	switch want {
	case reflect.String:
		if t.Kind() != reflect.String {
			return nil
		}
	case reflect.Slice:
		if t.Kind() != reflect.Slice || t.Elem().Kind() != reflect.String {
			return nil
		}
	default:
		return nil
	}
	return &precheck{ident: ident, index: index}
}

// jsonField is t's exported, non-embedded field whose JSON name is name
// (the name CEL gives it: ext.ParseStructTag("json")).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
