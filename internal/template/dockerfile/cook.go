package dockerfile

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// cooked is a word after Docker's quote and escape removal, with its
// variable references kept for Expand.
type cooked struct {
	// text is the word in Expand's syntax.
	text string
	// literal is the word's value when it has no variable reference.
	literal string
	// dynamic is set when the word references a variable, so its value
	// is only known after Expand.
	dynamic bool
}

// token kinds of a cooked word.
const (
	tokLiteral = iota // a character of the value
	tokSyntax         // part of a ${...} substitution
	tokVar            // a bare $name reference; name in tok.name
)

type token struct {
	kind    int
	r       rune
	name    string
	inBrace bool // literal inside a ${...} word, where '}' must be escaped
}

// cooker implements the word processing of Docker's shell lexer
// (ProcessWord) without the substitution itself: single quotes keep
// everything, double quotes keep everything but substitutions and the
// escapes \" \$ and \\ (with the escape character of the file), and outside
// quotes the escape character makes the next character literal.
type cooker struct {
	s      string
	pos    int
	esc    rune
	toks   []token
	braces int // depth of ${...} words being read
}

// cook processes one word as Docker does before environment replacement.
func cook(s string, esc rune) (cooked, error) {
	c := &cooker{s: s, esc: esc}
	if err := c.word(false); err != nil {
		return cooked{}, err
	}
	return c.result(), nil
}

var (
	errSingleQuote = errors.New("unexpected end of statement while looking for matching single-quote")
	errDoubleQuote = errors.New("unexpected end of statement while looking for matching double-quote")
)

func (c *cooker) next() (rune, bool) {
	if c.pos >= len(c.s) {
		return 0, false
	}
	r, w := utf8.DecodeRuneInString(c.s[c.pos:])
	c.pos += w
	return r, true
}

func (c *cooker) peek() (rune, bool) {
	if c.pos >= len(c.s) {
		return 0, false
	}
	r, _ := utf8.DecodeRuneInString(c.s[c.pos:])
	return r, true
}

func (c *cooker) lit(r rune) {
	c.toks = append(c.toks, token{kind: tokLiteral, r: r, inBrace: c.braces > 0})
}

func (c *cooker) syntax(s string) {
	for _, r := range s {
		c.toks = append(c.toks, token{kind: tokSyntax, r: r})
	}
}

// word reads up to the end of the input or, if inBraces, an unquoted '}'.
func (c *cooker) word(inBraces bool) error {
	for {
		r, ok := c.peek()
		if !ok {
			break
		}
		switch {
		case inBraces && r == '}':
			c.pos++
			c.syntax("}")
			return nil
		case r == '\'':
			c.pos++
			for {
				r, ok := c.next()
				if !ok {
					return errSingleQuote
				}
				if r == '\'' {
					break
				}
				c.lit(r)
			}
		case r == '"':
			if err := c.doubleQuoted(); err != nil {
				return err
			}
		case r == '$':
			if err := c.dollar(); err != nil {
				return err
			}
		default:
			c.next()
			if r == c.esc {
				if r, ok = c.next(); !ok {
					break // an escape at the end is dropped
				}
			}
			c.lit(r)
		}
	}
	if inBraces {
		return errMissingBrace
	}
	return nil
}

func (c *cooker) doubleQuoted() error {
	c.pos++ // "
	for {
		r, ok := c.peek()
		if !ok {
			return errDoubleQuote
		}
		switch {
		case r == '"':
			c.pos++
			return nil
		case r == '$':
			if err := c.dollar(); err != nil {
				return err
			}
		default:
			c.next()
			if r == c.esc {
				n, ok := c.peek()
				if !ok {
					continue // reported as an unterminated quote
				}
				if n == '"' || n == '$' || n == c.esc {
					r, _ = c.next()
				}
			}
			c.lit(r)
		}
	}
}

// dollar reads a substitution at c.pos, which is a '$'.
func (c *cooker) dollar() error {
	c.pos++
	if r, ok := c.peek(); !ok || r != '{' {
		name := scanName(c.s, &c.pos)
		if name == "" {
			c.lit('$')
			return nil
		}
		c.toks = append(c.toks, token{kind: tokVar, name: name})
		return nil
	}
	c.pos++
	if c.braces >= maxNesting {
		return errNestedTooDeeply
	}
	r, ok := c.peek()
	if !ok {
		return errMissingBrace
	}
	if r == '{' || r == '}' || r == ':' {
		return errBadSubstitution
	}
	c.syntax("${")
	c.syntax(scanName(c.s, &c.pos))
	op, ok := c.next()
	if !ok {
		return errMissingBrace
	}
	switch op {
	case '}':
		c.syntax("}")
		return nil
	case '-', '+', '?':
		c.syntax(string(op))
	case ':':
		mod, ok := c.next()
		if !ok {
			return errMissingBrace
		}
		if mod != '-' && mod != '+' && mod != '?' {
			return unsupportedModifier(mod)
		}
		c.syntax(":" + string(mod))
	default:
		return unsupportedModifier(op)
	}
	c.braces++
	err := c.word(true)
	c.braces--
	return err
}

// result serializes the tokens in Expand's syntax, escaping only where
// Expand would otherwise read a literal character as syntax. It works
// backwards so each token knows what follows it.
func (c *cooker) result() cooked {
	var out cooked
	var lit strings.Builder
	parts := make([]string, len(c.toks))
	next := rune(-1) // first character of the text after the token; -1 at the end
	for i := len(c.toks) - 1; i >= 0; i-- {
		t := c.toks[i]
		var s string
		switch t.kind {
		case tokSyntax:
			s = string(t.r)
		case tokVar:
			if next >= 0 && continuesName(t.name, next) {
				s = "${" + t.name + "}"
			} else {
				s = "$" + t.name
			}
		default:
			s = string(t.r)
			switch t.r {
			case '$':
				if next >= 0 && (next == '{' || continuesName("a", next) || isSpecialParam(next)) {
					s = `\$`
				}
			case '\\':
				if next == '$' || next == '\\' || next == '}' {
					s = `\\`
				}
			case '}':
				if t.inBrace {
					s = `\}`
				}
			}
		}
		parts[i] = s
		next, _ = utf8.DecodeRuneInString(s)
	}
	for _, t := range c.toks {
		switch t.kind {
		case tokLiteral:
			lit.WriteRune(t.r)
		default:
			out.dynamic = true
		}
	}
	out.text = strings.Join(parts, "")
	if !out.dynamic {
		out.literal = lit.String()
	}
	return out
}
