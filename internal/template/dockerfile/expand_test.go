package dockerfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
)

func mapLookup(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// TestExpand covers Expand on its own input syntax (no quotes), including
// the examples of the Dockerfile reference ("Environment replacement").
func TestExpand(t *testing.T) {
	env := map[string]string{"FOO": "/bar", "variable": "value", "EMPTY": "", "abc": "hello", "N1": "one"}
	tests := []struct {
		in, want string
	}{
		// Dockerfile reference: WORKDIR ${FOO}, ADD . $FOO, COPY \$FOO /quux.
		{"${FOO}", "/bar"},
		{"$FOO", "/bar"},
		{`\$FOO`, "$FOO"},
		// "\$foo or \${foo} will translate to $foo and ${foo} literals".
		{`\$foo`, "$foo"},
		{`\${foo}`, "${foo}"},
		// ${variable:-word}: the value if set, else word.
		{"${variable:-word}", "value"},
		{"${unset:-word}", "word"},
		{"${EMPTY:-word}", "word"},
		// ${variable:+word}: word if set, else "".
		{"${variable:+word}", "word"},
		{"${unset:+word}", ""},
		{"${EMPTY:+word}", ""},
		// Without the colon only unset counts.
		{"${EMPTY-word}", ""},
		{"${unset-word}", "word"},
		{"${EMPTY+word}", "word"},
		{"${unset+word}", ""},
		{"${variable?}", "value"},
		{"${EMPTY?}", ""},
		// word may hold substitutions, nested.
		{"${unset:-$FOO}", "/bar"},
		{"${unset:-${FOO}/x}", "/bar/x"},
		{"${unset:-${also:-deep}}", "deep"},
		{"${variable:+${FOO}}", "/bar"},
		{`${unset:-a\}b}`, "a}b"},
		// Unset without default is empty.
		{"a${unset}b", "ab"},
		{"a$unset/b", "a/b"},
		// Names: letters, digits, _; digit runs; special parameters.
		{"$FOO_x", ""},
		{"${FOO}_x", "/bar_x"},
		{"$N1x", ""},
		{"$1x", "x"},
		{"$$", ""},
		{"$", "$"},
		{"a$", "a$"},
		{"$.x", "$.x"},
		{"$-x", "x"},
		{"cost $ 5", "cost $ 5"},
		// Backslashes other than \$ \\ \} are kept.
		{`a\b`, `a\b`},
		{`a\\b`, `a\b`},
		{`a\\$FOO`, `a\/bar`},
		{`a\`, `a\`},
		{`}`, `}`},
		{"", ""},
		{"héllo ${FOO}", "héllo /bar"},
	}
	for _, tt := range tests {
		got, err := Expand(tt.in, mapLookup(env))
		if err != nil || got != tt.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestExpandErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"${FOO", "missing '}'"},
		{"${", "missing '}'"},
		{"${FOO:-x", "missing '}'"},
		{"${FOO:", "missing '}'"},
		{"${}", "bad substitution"},
		{"${:x}", "bad substitution"},
		{"${{x}", "bad substitution"},
		{"${FOO#x}", "unsupported modifier (#)"},
		{"${FOO:x}", "unsupported modifier (x)"},
		{"${FOO=x}", "unsupported modifier (=)"},
		{"${.}", "unsupported modifier (.)"},
		{"${unset?}", "unset: is not allowed to be unset"},
		{"${unset:?oops}", "unset: oops"},
		{"${EMPTY:?}", "EMPTY: is not allowed to be empty"},
		{strings.Repeat("${a:-", 200) + strings.Repeat("}", 200), "nested too deeply"},
	}
	for _, tt := range tests {
		_, err := Expand(tt.in, mapLookup(map[string]string{"EMPTY": ""}))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Expand(%q) error = %v; want %q", tt.in, err, tt.want)
		}
	}
	if got, err := Expand("$X ${Y:-y}", nil); err != nil || got != " y" {
		t.Errorf("Expand with nil lookup = %q, %v", got, err)
	}
}

// dockerEnv is the environment of BuildKit's envVarTest cases below.
var dockerEnv = map[string]string{"PWD": "/home", "SHELL": "bash", "KOREAN": "한국어", "NULL": ""}

// TestCookThenExpand checks that quote removal at parse time followed by
// Expand gives what Docker's single-pass word processing gives, on cases
// from BuildKit's shell lexer tests ("error" means Docker fails).
func TestCookThenExpand(t *testing.T) {
	tests := []struct{ in, want string }{
		{`hello`, `hello`},
		{`he'll'o`, `hello`},
		{`he'llo`, `error`},
		{`he\'llo`, `he'llo`},
		{`he\\'llo`, `error`},
		{`abc\tdef`, `abctdef`},
		{`"abc\tdef"`, `abc\tdef`},
		{`"abc\\tdef"`, `abc\tdef`},
		{`'abc\tdef'`, `abc\tdef`},
		{`hello\`, `hello`},
		{`hello\\`, `hello\`},
		{`"hello`, `error`},
		{`"hello\"`, `error`},
		{`"hel'lo"`, `hel'lo`},
		{`'hello`, `error`},
		{`'hello\'`, `hello\`},
		{`'hello\there'`, `hello\there`},
		{`'hello\\there'`, `hello\\there`},
		{`"''"`, `''`},
		{`$.`, `$.`},
		{`he$1x`, `hex`},
		{`he$.x`, `he$.x`},
		{`he$pwd.`, `he.`},
		{`he$PWD`, `he/home`},
		{`he\$PWD`, `he$PWD`},
		{`he\\$PWD`, `he\/home`},
		{`"he\$PWD"`, `he$PWD`},
		{`"he\\$PWD"`, `he\/home`},
		{`\${}`, `${}`},
		{`\${}aaa`, `${}aaa`},
		{`he\${}`, `he${}`},
		{`he\${}xx`, `he${}xx`},
		{`${}`, `error`},
		{`${}xx`, `error`},
		{`he${}`, `error`},
		{`he${}xx`, `error`},
		{`he${hi}`, `he`},
		{`he${hi}xx`, `hexx`},
		{`he${PWD}`, `he/home`},
		{`he${.}`, `error`},
		{`he${XXX:-000}xx`, `he000xx`},
		{`he${PWD:-000}xx`, `he/homexx`},
		{`he${XXX:-$PWD}xx`, `he/homexx`},
		{`he${XXX:-${PWD:-yyy}}xx`, `he/homexx`},
		{`he${XXX:-${YYY:-yyy}}xx`, `heyyyxx`},
		{`he${XXX:YYY}`, `error`},
		{`he${XXX?}`, `error`},
		{`he${XXX:?}`, `error`},
		{`he${PWD?}`, `he/home`},
		{`he${PWD:?}`, `he/home`},
		{`he${NULL?}`, `he`},
		{`he${NULL:?}`, `error`},
		{`he${XXX:+${PWD}}xx`, `hexx`},
		{`he${PWD:+${XXX}}xx`, `hexx`},
		{`he${PWD:+${SHELL}}xx`, `hebashxx`},
		{`he${XXX:+000}xx`, `hexx`},
		{`he${PWD:+000}xx`, `he000xx`},
		{`'he${XX}'`, `he${XX}`},
		{`"he${PWD}"`, `he/home`},
		{`"he'$PWD'"`, `he'/home'`},
		{`"$PWD"`, `/home`},
		{`'$PWD'`, `$PWD`},
		{`'\$PWD'`, `\$PWD`},
		{`'"hello"'`, `"hello"`},
		{`'he\$PWD'`, `he\$PWD`},
		{`he${PWD`, `error`},
		{`he${PWD=000}xx`, `error`},
		{`he${PWD+${PWD}:}xx${PWD`, `error`},
		{`he${XXX:-\$PWD:}xx`, `he$PWD:xx`},
		{`he${XXX:-\${PWD}z}xx`, `he${PWDz}xx`},
		{`안녕하세요`, `안녕하세요`},
		{`안'녕'하세요`, `안녕하세요`},
		{`안녕\$PWD`, `안녕$PWD`},
		{`"안녕'$PWD'"`, `안녕'/home'`},
		{`$KOREAN`, `한국어`},
		{`안녕$KOREAN`, `안녕한국어`},
		{`${{aaa}`, `error`},
		{`${aaa}}`, `}`},
		{`${aaa`, `error`},
		{`${aaa:`, `error`},
		// Cases for the re-escaping done by the parser.
		{`"$PWD"x`, `/homex`},
		{`"$1"2`, `2`},
		{`'$'PWD`, `$PWD`},
		{`'$'"$PWD"`, `$/home`},
		{`'\'"$PWD"`, `\/home`},
		{`'\'$PWD`, `\/home`},
		{`'\''$'`, `\$`},
		{`${XXX:-'}'}`, `}`},
		{`${XXX:-"a}b"}`, `a}b`},
		{`${XXX:-'\'}`, `\`},
		{`$"{x}"`, `${x}`},
		{`'}'`, `}`},
	}
	for _, tt := range tests {
		got, err := cookThenExpand(tt.in, '\\', dockerEnv)
		if err != nil {
			got = "error"
		}
		if got != tt.want {
			t.Errorf("%s: got %q (%v), want %q", tt.in, got, err, tt.want)
		}
		// The reference lexer must agree, or the fuzzer below proves nothing.
		ref, err := dockerWord(tt.in, '\\', dockerEnv)
		if err != nil {
			ref = "error"
		}
		if ref != tt.want {
			t.Errorf("reference %s: got %q (%v), want %q", tt.in, ref, err, tt.want)
		}
	}
}

func TestCookBacktickEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a`$PWD", "a$PWD"},
		{`C:\dir\$PWD`, `C:\dir\/home`},
		{"\"a`\"b\"", `a"b`},
		{`"C:\dir"`, `C:\dir`},
		{"x``", "x`"},
	}
	for _, tt := range tests {
		got, err := cookThenExpand(tt.in, '`', dockerEnv)
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func cookThenExpand(s string, esc rune, env map[string]string) (string, error) {
	c, err := cook(s, esc)
	if err != nil {
		return "", err
	}
	out, err := Expand(c.text, mapLookup(env))
	if err == nil && !c.dynamic && out != c.literal {
		return "", fmt.Errorf("literal %q differs from expansion %q", c.literal, out)
	}
	return out, err
}

// dockerWord is an independent, single-pass model of Docker's ProcessWord:
// quote removal, escapes and substitution together, as BuildKit does.
func dockerWord(s string, esc rune, env map[string]string) (string, error) {
	l := &refLexer{s: []rune(s), esc: esc, env: env}
	return l.word(0, 0)
}

type refLexer struct {
	s   []rune
	pos int
	esc rune
	env map[string]string
}

var errRef = errors.New("reference lexer error")

func (l *refLexer) peek() rune {
	if l.pos >= len(l.s) {
		return -1
	}
	return l.s[l.pos]
}

func (l *refLexer) next() rune {
	r := l.peek()
	if r >= 0 {
		l.pos++
	}
	return r
}

func (l *refLexer) word(stop rune, depth int) (string, error) {
	var b strings.Builder
	for l.peek() >= 0 {
		ch := l.peek()
		switch {
		case stop != 0 && ch == stop:
			l.next()
			return b.String(), nil
		case ch == '\'':
			l.next()
			for {
				c := l.next()
				if c < 0 {
					return "", errRef
				}
				if c == '\'' {
					break
				}
				b.WriteRune(c)
			}
		case ch == '"':
			l.next()
			for {
				c := l.peek()
				if c < 0 {
					return "", errRef
				}
				if c == '"' {
					l.next()
					break
				}
				if c == '$' {
					v, err := l.dollar(depth)
					if err != nil {
						return "", err
					}
					b.WriteString(v)
					continue
				}
				l.next()
				if c == l.esc {
					n := l.peek()
					if n < 0 {
						continue
					}
					if n == '"' || n == '$' || n == l.esc {
						c = l.next()
					}
				}
				b.WriteRune(c)
			}
		case ch == '$':
			v, err := l.dollar(depth)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		default:
			l.next()
			if ch == l.esc {
				ch = l.next()
				if ch < 0 {
					continue
				}
			}
			b.WriteRune(ch)
		}
	}
	if stop != 0 {
		return "", errRef
	}
	return b.String(), nil
}

func (l *refLexer) name() string {
	var b strings.Builder
	for l.peek() >= 0 {
		c := l.peek()
		if b.Len() == 0 && unicode.IsDigit(c) {
			for l.peek() >= 0 && unicode.IsDigit(l.peek()) {
				b.WriteRune(l.next())
			}
			return b.String()
		}
		if b.Len() == 0 && strings.ContainsRune("@*#?-$!0", c) {
			return string(l.next())
		}
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '_' {
			break
		}
		b.WriteRune(l.next())
	}
	return b.String()
}

func (l *refLexer) dollar(depth int) (string, error) {
	l.next()
	if l.peek() != '{' {
		n := l.name()
		if n == "" {
			return "$", nil
		}
		return l.env[n], nil
	}
	l.next()
	if depth >= maxNesting {
		return "", errRef
	}
	switch l.peek() {
	case -1, '{', '}', ':':
		return "", errRef
	}
	n := l.name()
	value, set := l.env[n]
	op := l.next()
	colon := false
	switch op {
	case '}':
		return value, nil
	case ':':
		op = l.next()
		colon = true
		if op != '-' && op != '+' && op != '?' {
			return "", errRef
		}
	case '-', '+', '?':
	default:
		return "", errRef
	}
	w, err := l.word('}', depth+1)
	if err != nil {
		return "", err
	}
	unset := !set || (colon && value == "")
	switch op {
	case '-':
		if unset {
			return w, nil
		}
		return value, nil
	case '+':
		if unset {
			return "", nil
		}
		return w, nil
	}
	if unset {
		return "", errRef
	}
	return value, nil
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		"", "$A", "${A}", "${A:-x}", "${B-y}", "${A:+$B}", "${E+z}", `\$A`, `\\$A`, `\}`,
		`"$A"x`, `'$A'`, `${X:-"a}b"}`, `${X:-'\'}`, `$"{x}"`, "${", "${A:?m}", "${E?}",
		`he${XXX:-\${PWD}z}xx`, "a`$A", "$1$$$@x", "${A#b}",
	} {
		f.Add(s)
	}
	env := map[string]string{"A": "x", "B": "$A}", "E": "", "1": `\`}
	f.Fuzz(func(t *testing.T, s string) {
		// Expand must not panic on anything.
		Expand(s, mapLookup(env)) //nolint:errcheck
		Expand(s, nil)            //nolint:errcheck
		// Parse-time quote removal followed by Expand must give what
		// Docker's single pass gives.
		for _, esc := range []rune{'\\', '`'} {
			want, werr := dockerWord(s, esc, env)
			got, gerr := cookThenExpand(s, esc, env)
			if (werr != nil) != (gerr != nil) || got != want {
				c, _ := cook(s, esc)
				t.Fatalf("escape %c, %q cooked to %q: got %q (%v), Docker gives %q (%v)", esc, s, c.text, got, gerr, want, werr)
			}
		}
	})
}
