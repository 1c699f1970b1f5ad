package dockerfile

import (
	"encoding/json"
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// isBlank reports whether c separates words, as BuildKit's [\t\v\f\r ].
func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'
}

// splitBlanks splits s at runs of blanks, ignoring quotes, as BuildKit does
// for FROM, EXPOSE and the shell form of COPY and ADD.
func splitBlanks(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r < utf8.RuneSelf && isBlank(byte(r)) })
}

// cutKeyword splits a logical line into its keyword and the rest.
func cutKeyword(line string) (string, string) {
	for i := 0; i < len(line); i++ {
		if isBlank(line[i]) {
			return line[:i], strings.TrimSpace(line[i:])
		}
	}
	return line, ""
}

// parseWords splits s into words at unquoted whitespace, keeping quotes and
// escape characters in the words (BuildKit's parseWords, used for ENV, LABEL
// and ARG).
func parseWords(s string, esc rune) []string {
	var words []string
	var word strings.Builder
	inWord, blankOK := false, false
	var quote rune
	flush := func() {
		if blankOK || word.Len() > 0 {
			words = append(words, word.String())
		}
		word.Reset()
		inWord, blankOK = false, false
	}
	for pos := 0; pos < len(s); {
		ch, w := utf8.DecodeRuneInString(s[pos:])
		pos += w
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			} else if ch == esc && quote != '\'' {
				if pos == len(s) {
					quote = 0
					continue // drop an escape at the very end
				}
				word.WriteRune(ch)
				ch, w = utf8.DecodeRuneInString(s[pos:])
				pos += w
			}
			word.WriteRune(ch)
		case unicode.IsSpace(ch):
			if inWord {
				flush()
			}
		default:
			inWord = true
			if ch == '\'' || ch == '"' {
				quote, blankOK = ch, true
			} else if ch == esc {
				if pos == len(s) {
					continue // drop an escape at the very end
				}
				word.WriteRune(ch)
				ch, w = utf8.DecodeRuneInString(s[pos:])
				pos += w
			}
			word.WriteRune(ch)
		}
	}
	if inWord {
		flush()
	}
	return words
}

// extractFlags splits leading "--name[=value]" words off s, removing quotes
// and backslash escapes from them as BuildKit does (with '\' whatever the
// escape directive says). A "--" word ends the flags.
func extractFlags(s string) (flags []string, rest string) {
	pos := 0
	for {
		for pos < len(s) && unicode.IsSpace(rune(s[pos])) {
			pos++
		}
		if pos+1 >= len(s) || s[pos] != '-' || s[pos+1] != '-' {
			return flags, s[pos:]
		}
		var word []byte
		var quote byte
		blankOK := false
	scan:
		for ; pos < len(s); pos++ {
			c := s[pos]
			switch {
			case quote != 0:
				if c == quote {
					quote = 0
					continue
				}
			case unicode.IsSpace(rune(c)):
				break scan
			case c == '\'' || c == '"':
				quote, blankOK = c, true
				continue
			}
			if c == '\\' {
				if pos+1 == len(s) {
					continue
				}
				pos++
				c = s[pos]
			}
			word = append(word, c)
		}
		if string(word) == "--" {
			return flags, strings.TrimLeftFunc(s[pos:], unicode.IsSpace)
		}
		if blankOK || len(word) > 0 {
			flags = append(flags, string(word))
		}
	}
}

var errNotStringArray = errors.New("when using JSON array syntax, arrays must be comprised of strings only")

// parseJSON parses s as a JSON array of strings. ok is false when s is not
// a JSON array at all (so it is shell form); err is set for a JSON array with
// other elements, which Docker refuses.
func parseJSON(s string) (args []string, ok bool, err error) {
	s = trimLeft(s)
	if !strings.HasPrefix(s, "[") {
		return nil, false, nil
	}
	var v []any
	if json.Unmarshal([]byte(s), &v) != nil {
		return nil, false, nil
	}
	args = make([]string, 0, len(v))
	for _, e := range v {
		str, isStr := e.(string)
		if !isStr {
			return nil, true, errNotStringArray
		}
		args = append(args, str)
	}
	return args, true, nil
}

// hasHeredoc reports whether the shell-form text s contains a here-document
// ("<<EOF", "<<-EOF", "2<<'EOF'"), found as BuildKit does: a word, outside
// quotes, of the form [digits]<<[-]name with a non-empty name.
func hasHeredoc(s string, esc rune) bool {
	if !strings.Contains(s, "<<") {
		return false
	}
	for _, w := range parseWords(s, esc) {
		i := 0
		for i < len(w) && w[i] >= '0' && w[i] <= '9' {
			i++
		}
		if !strings.HasPrefix(w[i:], "<<") {
			continue
		}
		name := strings.TrimPrefix(w[i+2:], "-")
		if strings.Contains(name, "<") {
			continue
		}
		name = strings.NewReplacer(`"`, "", `'`, "", string(esc), "").Replace(name)
		if name != "" {
			return true
		}
	}
	return false
}
