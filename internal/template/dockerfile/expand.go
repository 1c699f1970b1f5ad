package dockerfile

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNesting bounds nested ${...} substitutions, so hostile input cannot
// recurse without limit.
const maxNesting = 100

// Expand expands environment variables in s with Docker's rules: $VAR and
// ${VAR}; ${VAR:-word} (word if VAR is unset or empty), ${VAR-word} (word if
// VAR is unset), ${VAR:+word} (word if VAR is set and not empty, else ""),
// ${VAR+word} (word if VAR is set, else ""), ${VAR:?msg} and ${VAR?msg}
// (error if VAR is unset or, with the colon, empty). The word may itself
// contain substitutions. A name is letters, digits and '_' not starting with
// a digit, a run of digits ($1), or one of Docker's special parameters
// (@ * # ? - $ ! 0); a '$' that starts no name is kept.
//
// `\$` gives a literal '$', `\\` a literal backslash and `\}` a literal '}'
// (so that a word can contain one); any other backslash is kept. Unset
// variables without a default expand to "". A nil lookup treats every
// variable as unset. Unbalanced braces and unsupported modifiers (such as
// ${VAR#pattern}) are errors.
//
// Quotes are not special: Parse has already removed them from the fields it
// returns, escaping what must stay literal.
func Expand(s string, lookup func(name string) (string, bool)) (string, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	e := &expander{s: s, lookup: lookup}
	out, err := e.word(false, 0)
	if err != nil {
		return "", fmt.Errorf("expand %q: %w", s, err)
	}
	return out, nil
}

var (
	errMissingBrace    = errors.New("syntax error: missing '}'")
	errBadSubstitution = errors.New("syntax error: bad substitution")
	errNestedTooDeeply = errors.New("substitutions nested too deeply")
)

func unsupportedModifier(r rune) error {
	return fmt.Errorf("unsupported modifier (%c) in substitution", r)
}

type expander struct {
	s      string
	pos    int
	lookup func(string) (string, bool)
}

// word expands up to the end of s or, if inBraces, up to an unescaped '}',
// which it consumes.
func (e *expander) word(inBraces bool, depth int) (string, error) {
	var b strings.Builder
	for e.pos < len(e.s) {
		c := e.s[e.pos]
		switch {
		case inBraces && c == '}':
			e.pos++
			return b.String(), nil
		case c == '\\':
			if e.pos+1 < len(e.s) && strings.IndexByte(`$\}`, e.s[e.pos+1]) >= 0 {
				b.WriteByte(e.s[e.pos+1])
				e.pos += 2
			} else {
				b.WriteByte(c)
				e.pos++
			}
		case c == '$':
			v, err := e.dollar(depth)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		default:
			b.WriteByte(c)
			e.pos++
		}
	}
	if inBraces {
		return "", errMissingBrace
	}
	return b.String(), nil
}

// dollar expands the substitution at e.pos, which is a '$'.
func (e *expander) dollar(depth int) (string, error) {
	e.pos++
	if e.pos >= len(e.s) || e.s[e.pos] != '{' {
		name := scanName(e.s, &e.pos)
		if name == "" {
			return "$", nil
		}
		v, _ := e.lookup(name)
		return v, nil
	}
	e.pos++
	if depth >= maxNesting {
		return "", errNestedTooDeeply
	}
	if e.pos >= len(e.s) {
		return "", errMissingBrace
	}
	switch e.s[e.pos] {
	case '{', '}', ':':
		return "", errBadSubstitution
	}
	name := scanName(e.s, &e.pos)
	if e.pos >= len(e.s) {
		return "", errMissingBrace
	}
	op, w := utf8.DecodeRuneInString(e.s[e.pos:])
	e.pos += w
	colon := false
	switch op {
	case '}':
		v, _ := e.lookup(name)
		return v, nil
	case '-', '+', '?':
	case ':':
		if e.pos >= len(e.s) {
			return "", errMissingBrace
		}
		op, w = utf8.DecodeRuneInString(e.s[e.pos:])
		e.pos += w
		if op != '-' && op != '+' && op != '?' {
			return "", unsupportedModifier(op)
		}
		colon = true
	default:
		return "", unsupportedModifier(op)
	}
	word, err := e.word(true, depth+1)
	if err != nil {
		return "", err
	}
	value, set := e.lookup(name)
	// With a colon an empty value counts as unset.
	present := set && (!colon || value != "")
	switch op {
	case '-':
		if !present {
			return word, nil
		}
		return value, nil
	case '+':
		if present {
			return word, nil
		}
		return "", nil
	default: // '?'
		if present {
			return value, nil
		}
		if word == "" {
			word = "is not allowed to be unset"
			if set {
				word = "is not allowed to be empty"
			}
		}
		return "", fmt.Errorf("%s: %s", name, word)
	}
}

// isSpecialParam reports whether c is a one-character special parameter
// name ($@, $*, ...), as in Docker.
func isSpecialParam(c rune) bool {
	return strings.ContainsRune("@*#?-$!0", c)
}

// scanName reads a variable name at *pos: a run of digits, one special
// parameter character, or letters, digits and '_'. It returns "" (and
// leaves *pos) if there is none.
func scanName(s string, pos *int) string {
	start := *pos
	for i := *pos; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case i == start && unicode.IsDigit(r):
			for i < len(s) {
				r, w = utf8.DecodeRuneInString(s[i:])
				if !unicode.IsDigit(r) {
					break
				}
				i += w
			}
			*pos = i
			return s[start:i]
		case i == start && isSpecialParam(r):
			*pos = i + w
			return s[start : i+w]
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_':
			i += w
		default:
			*pos = i
			return s[start:i]
		}
	}
	*pos = len(s)
	return s[start:]
}

// continuesName reports whether r, following the name, would be read as
// part of it.
func continuesName(name string, r rune) bool {
	first, _ := utf8.DecodeRuneInString(name)
	switch {
	case unicode.IsDigit(first):
		return unicode.IsDigit(r)
	case isSpecialParam(first):
		return false
	default:
		return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'
	}
}
