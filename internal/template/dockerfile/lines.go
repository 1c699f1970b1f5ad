package dockerfile

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// parser holds the state of one Parse call.
type parser struct {
	escape     rune // '\\' or '`'
	file       *File
	sawFrom    bool
	directives map[string]bool // directives seen
	// directivesDone is set at the first line that is not a parser
	// directive: directives are only honoured at the top of the file.
	directivesDone bool
}

// logicalLine is an instruction with its continuation lines joined.
type logicalLine struct {
	start, end int // 1-based
	text       string
}

// reDirective matches a parser directive, on a line with leading blanks
// removed, as BuildKit does.
var reDirective = regexp.MustCompile(`^#[ \t]*([a-zA-Z][a-zA-Z0-9]*)[ \t]*=[ \t]*(.+?)[ \t]*$`)

// maxWarnings bounds File.Warnings.
const maxWarnings = 100

func (p *parser) warnf(line int, format string, args ...any) {
	switch n := len(p.file.Warnings); {
	case n < maxWarnings:
		p.file.Warnings = append(p.file.Warnings, fmt.Sprintf("Dockerfile:%d: ", line)+fmt.Sprintf(format, args...))
	case n == maxWarnings:
		p.file.Warnings = append(p.file.Warnings, fmt.Sprintf("Dockerfile:%d: too many warnings; the rest are left out", line))
	}
}

// directive handles a possible parser directive on line n (leading blanks
// removed). It reports whether the line was one.
func (p *parser) directive(line string, n int) (bool, error) {
	if p.directivesDone {
		return false, nil
	}
	m := reDirective.FindStringSubmatch(line)
	if m == nil {
		p.directivesDone = true
		return false, nil
	}
	name, value := strings.ToLower(m[1]), m[2]
	switch name {
	case "escape", "syntax", "check":
	default:
		// Unknown directives are comments and end the directives.
		p.directivesDone = true
		return false, nil
	}
	if p.directives == nil {
		p.directives = map[string]bool{}
	}
	if p.directives[name] {
		return false, errorf(n, "only one %s parser directive can be used", name)
	}
	p.directives[name] = true
	switch name {
	case "escape":
		if value != "\\" && value != "`" {
			return false, errorf(n, "invalid escape token %q: use ` or \\", value)
		}
		p.escape = rune(value[0])
	case "syntax":
		p.warnf(n, "syntax directive %q is ignored; Warden uses its own Dockerfile parser", value)
	case "check":
		p.warnf(n, "check directive is ignored")
	}
	return true, nil
}

func trimLeft(s string) string { return strings.TrimLeftFunc(s, unicode.IsSpace) }

func isComment(line string) bool {
	line = trimLeft(line)
	return line != "" && line[0] == '#'
}

// trimContinuation removes a trailing escape character (and blanks after
// it) and reports whether the instruction continues on the next line.
func (p *parser) trimContinuation(line string) (string, bool) {
	t := strings.TrimRight(line, " \t")
	if strings.HasSuffix(t, string(p.escape)) {
		return t[:len(t)-1], true
	}
	return line, false
}

// logicalLines splits the file into instructions, handling directives,
// comments, blank lines and continuations as BuildKit does.
func (p *parser) logicalLines(data string) ([]logicalLine, error) {
	data = strings.TrimPrefix(data, "\uFEFF")
	lines := strings.Split(data, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	var out []logicalLine
	for i := 0; i < len(lines); i++ {
		n := i + 1
		first := trimLeft(lines[i])
		ok, err := p.directive(first, n)
		if err != nil {
			return nil, err
		}
		if ok || isComment(first) {
			continue
		}
		text, more := p.trimContinuation(first)
		if !more && strings.TrimSpace(text) == "" {
			continue
		}
		var b strings.Builder
		b.WriteString(text)
		warnedEmpty := false
		for more && i+1 < len(lines) {
			i++
			next := lines[i]
			if isComment(next) {
				continue
			}
			if trimLeft(next) == "" {
				if !warnedEmpty {
					p.warnf(i+1, "empty continuation line (Docker will reject these in a future release)")
					warnedEmpty = true
				}
				continue
			}
			var t string
			t, more = p.trimContinuation(next)
			b.WriteString(t)
		}
		text = strings.TrimSpace(b.String())
		if text == "" {
			continue
		}
		out = append(out, logicalLine{start: n, end: i + 1, text: text})
	}
	return out, nil
}
