package govern

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// prefilterMatches replaces cel's optimisation of matches() calls with a
// constant pattern (both overloads; keyed by overload ID, so it takes
// precedence over cel's own, which OptOptimize keys by function name): it
// compiles the pattern once, as cel's does, and before running the
// regular expression checks that the input contains the literal strings
// every match must contain (in `\bgit\s+push\b`, "git" and "push"). Most
// inputs of most rules lack them, and strings.Contains is far cheaper
// than the matcher. The answer is the one matches() gives: a literal every
// match contains is in every input that matches.
var prefilterMatches = []*interpreter.RegexOptimization{
	{Function: "matches", OverloadID: overloads.Matches, RegexIndex: 1, Factory: prefilteredMatch},
	{Function: "matches", OverloadID: overloads.MatchesString, RegexIndex: 1, Factory: prefilteredMatch},
}

func prefilteredMatch(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	lits := requiredLiterals(pattern)
	return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(vals ...ref.Val) ref.Val {
		if len(vals) != 2 {
			return types.NoSuchOverloadErr()
		}
		in, ok := vals[0].Value().(string)
		if !ok {
			return types.NoSuchOverloadErr()
		}
		for _, l := range lits {
			if !strings.Contains(in, l) {
				return types.False
			}
		}
		return types.Bool(re.MatchString(in))
	}), nil
}

// requiredLiterals returns case-sensitive literal strings that every match
// of the pattern contains, longest first (at most four), or none.
func requiredLiterals(pattern string) []string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	var lits []string
	var walk func(re *syntax.Regexp)
	walk = func(re *syntax.Regexp) {
		switch re.Op {
		case syntax.OpLiteral:
			if re.Flags&syntax.FoldCase != 0 {
				return
			}
			s := string(re.Rune)
			// U+FFFD in a pattern also matches invalid UTF-8 in the input,
			// which strings.Contains would not find.
			if strings.ContainsRune(s, utf8.RuneError) {
				return
			}
			lits = append(lits, s)
		case syntax.OpConcat:
			for _, sub := range re.Sub {
				walk(sub)
			}
		case syntax.OpCapture, syntax.OpPlus:
			walk(re.Sub[0])
		case syntax.OpRepeat:
			if re.Min >= 1 {
				walk(re.Sub[0])
			}
		}
		// Alternations, optional and starred parts, classes: nothing
		// every match must contain.
	}
	walk(re)
	slices.SortStableFunc(lits, func(a, b string) int { return len(b) - len(a) })
	return lits[:min(len(lits), 4)]
}
