package guard

import "strings"

// A small JSON parser that records where the string values are, so that
// they can be inspected in place (no decoding into Go values, no copies of
// strings without escapes).

// jelem is a path element: an object member or an array element.
type jelem struct {
	parent   int32
	index    int32 // array index, or -1 for an object member
	keyStart int32 // the member name's raw content in the document
	keyEnd   int32
	keyEsc   bool
}

type jleaf struct {
	start, end int32 // raw content of the string, without quotes
	esc        bool  // holds backslash escapes
	elem       int32
}

type jparser struct {
	s      string
	i      int
	elems  []jelem
	leaves []jleaf
	depth  int
}

// maxJSONNesting bounds object and array nesting; deeper documents are
// inspected as text.
const maxJSONNesting = 128

func (p *jparser) parse() bool {
	p.ws()
	if !p.value(-1, -1, 0, 0, false) {
		return false
	}
	p.ws()
	return p.i == len(p.s)
}

func (p *jparser) ws() {
	for p.i < len(p.s) && isSpace(p.s[p.i]) {
		p.i++
	}
}

func (p *jparser) addElem(parent, index int32, ks, ke int32, kesc bool) int32 {
	p.elems = append(p.elems, jelem{parent: parent, index: index, keyStart: ks, keyEnd: ke, keyEsc: kesc})
	return int32(len(p.elems) - 1)
}

func (p *jparser) value(parent, index, ks, ke int32, kesc bool) bool {
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; c {
	case '{':
		p.depth++
		if p.depth > maxJSONNesting {
			return false
		}
		e := p.addElem(parent, index, ks, ke, kesc)
		p.i++
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			p.depth--
			return true
		}
		for {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return false
			}
			s, t, esc, ok := p.str()
			if !ok {
				return false
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return false
			}
			p.i++
			p.ws()
			if !p.value(e, -1, s, t, esc) {
				return false
			}
			p.ws()
			if p.i >= len(p.s) {
				return false
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == '}' {
				p.i++
				p.depth--
				return true
			}
			return false
		}
	case '[':
		p.depth++
		if p.depth > maxJSONNesting {
			return false
		}
		e := p.addElem(parent, index, ks, ke, kesc)
		p.i++
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			p.depth--
			return true
		}
		for n := int32(0); ; n++ {
			p.ws()
			if !p.value(e, n, 0, 0, false) {
				return false
			}
			p.ws()
			if p.i >= len(p.s) {
				return false
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == ']' {
				p.i++
				p.depth--
				return true
			}
			return false
		}
	case '"':
		s, t, esc, ok := p.str()
		if !ok {
			return false
		}
		e := p.addElem(parent, index, ks, ke, kesc)
		p.leaves = append(p.leaves, jleaf{start: s, end: t, esc: esc, elem: e})
		return true
	case 't':
		return p.lit("true")
	case 'f':
		return p.lit("false")
	case 'n':
		return p.lit("null")
	default:
		return p.number()
	}
}

func (p *jparser) lit(w string) bool {
	if !strings.HasPrefix(p.s[p.i:], w) {
		return false
	}
	p.i += len(w)
	return true
}

func (p *jparser) number() bool {
	s := p.s
	i := p.i
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) {
		return false
	}
	if s[i] == '0' {
		i++
	} else if '1' <= s[i] && s[i] <= '9' {
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	p.i = i
	return true
}

// str reads a string at p.i (an opening quote) and returns its raw content.
func (p *jparser) str() (start, end int32, esc, ok bool) {
	s := p.s
	i := p.i + 1
	start = int32(i)
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			p.i = i + 1
			return start, int32(i), esc, true
		case c == '\\':
			if i+1 >= len(s) {
				return 0, 0, false, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(s[i+2:]); !ok {
					return 0, 0, false, false
				}
				i += 6
			default:
				return 0, 0, false, false
			}
			esc = true
		case c < 0x20:
			return 0, 0, false, false
		default:
			i++
		}
	}
	return 0, 0, false, false
}

// key returns the member name of element e, or "".
func (p *jparser) key(e int32) string {
	el := p.elems[e]
	if el.index >= 0 || el.parent < 0 {
		return ""
	}
	raw := p.s[el.keyStart:el.keyEnd]
	if el.keyEsc {
		d, _ := unescapeJSON(raw, 0)
		return d
	}
	return raw
}

// path formats the path of element e, like "params.arguments.env[2]".
func (p *jparser) path(e int32, b *strings.Builder) {
	if e < 0 {
		return
	}
	el := p.elems[e]
	p.path(el.parent, b)
	if el.parent < 0 {
		return
	}
	if el.index >= 0 {
		b.WriteByte('[')
		b.WriteString(itoa(int(el.index)))
		b.WriteByte(']')
		return
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(p.key(e))
}

// validJSON reports whether s is one JSON value (of any type) with nothing
// but white space around it.
func validJSON(s string) bool {
	p := jparser{s: s}
	return p.parse()
}

// docCtx says which JSON string is being inspected: a leaf of a parsed
// document, which may itself sit in a string of an outer document.
type docCtx struct {
	p     *jparser
	leaf  int32
	outer *docCtx
}

func (st *state) curPath() string {
	if st.doc.p == nil {
		return ""
	}
	var b strings.Builder
	st.doc.write(&b)
	return b.String()
}

func (d *docCtx) write(b *strings.Builder) {
	if d.outer != nil {
		d.outer.write(b)
	}
	d.p.path(d.leaf, b)
}
