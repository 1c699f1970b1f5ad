package main

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// node helpers over a yaml mapping node.

func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func str(n *yaml.Node, key string) string {
	if v := get(n, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// pairs returns a mapping node's key/value pairs in document order.
func pairs(n *yaml.Node) [][2]*yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	out := make([][2]*yaml.Node, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}

func scalars(n *yaml.Node) []string {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	var out []string
	for _, c := range n.Content {
		out = append(out, c.Value)
	}
	return out
}

// field is one property of an object type.
type field struct {
	name     string
	typ      *yaml.Node
	required bool
	doc      string
}

// def is one named type to emit.
type def struct {
	name   string
	doc    string
	fields []field    // object types
	alias  *yaml.Node // non-object types
	object bool
}

type operation struct {
	id, method, path string
}

// model is what both emitters need: named types in spec order, the error-code table and
// the operations.
type model struct {
	schemas    *yaml.Node // components.schemas, for allOf references
	defs       []*def
	errStatus  [][2]string // code, status in spec order
	operations []operation
}

func load(src []byte) (*model, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("parse spec: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("parse spec: empty document")
	}
	root := doc.Content[0]
	schemas := get(get(root, "components"), "schemas")
	if schemas == nil {
		return nil, fmt.Errorf("spec has no components.schemas")
	}
	m := &model{schemas: schemas}
	for _, p := range pairs(schemas) {
		m.addDef(p[0].Value, p[1])
		if p[0].Value == "ErrorCode" {
			for _, e := range pairs(get(p[1], "x-status")) {
				m.errStatus = append(m.errStatus, [2]string{e[0].Value, e[1].Value})
			}
		}
	}
	for _, p := range pairs(get(root, "paths")) {
		for _, op := range pairs(p[1]) {
			switch op[0].Value {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue
			}
			if id := str(op[1], "operationId"); id != "" {
				m.operations = append(m.operations, operation{id, strings.ToUpper(op[0].Value), p[0].Value})
				m.responseDef(id, op[1])
			}
		}
	}
	sort.SliceStable(m.operations, func(i, j int) bool { return m.operations[i].id < m.operations[j].id })
	return m, nil
}

// responseDef names an operation's inline JSON response object (its first 2xx one)
// <OperationId>Response, so that the SDKs can type what the call returns.
func (m *model) responseDef(id string, op *yaml.Node) {
	for _, code := range []string{"200", "201", "202"} {
		s := get(get(get(get(get(op, "responses"), code), "content"), "application/json"), "schema")
		if s == nil {
			continue
		}
		name := strings.ToUpper(id[:1]) + id[1:] + "Response"
		if _, named := inlineNames[s]; !named && isObject(s) && get(m.schemas, name) == nil {
			inlineNames[s] = name
			m.addDef(name, s)
		}
		return
	}
}

func isObject(s *yaml.Node) bool {
	return get(s, "properties") != nil && get(s, "$ref") == nil && get(s, "oneOf") == nil && get(s, "anyOf") == nil
}

// allOfObject flattens an allOf of object schemas (references to them, or inline ones) into
// one object schema: the properties and required names of all parts, in order. It returns
// nil when s is not such an allOf.
func (m *model) allOfObject(s *yaml.Node) *yaml.Node {
	parts := content(get(s, "allOf"))
	if len(parts) < 2 {
		return nil
	}
	props := &yaml.Node{Kind: yaml.MappingNode}
	req := &yaml.Node{Kind: yaml.SequenceNode}
	for _, p := range parts {
		if r := str(p, "$ref"); r != "" {
			p = get(m.schemas, r[strings.LastIndex(r, "/")+1:])
		}
		if p == nil || !isObject(p) {
			return nil
		}
	next:
		for _, kv := range pairs(get(p, "properties")) {
			for i := 0; i+1 < len(props.Content); i += 2 {
				if props.Content[i].Value == kv[0].Value { // a later part refines the property
					props.Content[i+1] = kv[1]
					continue next
				}
			}
			props.Content = append(props.Content, kv[0], kv[1])
		}
		if r := get(p, "required"); r != nil {
			req.Content = append(req.Content, r.Content...)
		}
	}
	out := &yaml.Node{Kind: yaml.MappingNode}
	key := func(k string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: k} }
	if d := get(s, "description"); d != nil {
		out.Content = append(out.Content, key("description"), d)
	}
	out.Content = append(out.Content, key("type"), key("object"), key("properties"), props, key("required"), req)
	return out
}

// addDef records the named type name for schema s, and the nested object types it holds.
func (m *model) addDef(name string, s *yaml.Node) {
	if flat := m.allOfObject(s); flat != nil {
		s = flat
	}
	d := &def{name: name, doc: firstParagraph(str(s, "description"))}
	m.defs = append(m.defs, d)
	if !isObject(s) {
		d.alias = s
		m.nested(name, s)
		return
	}
	d.object = true
	req := map[string]bool{}
	for _, r := range scalars(get(s, "required")) {
		req[r] = true
	}
	for _, p := range pairs(get(s, "properties")) {
		ps := p[1]
		d.fields = append(d.fields, field{name: p[0].Value, typ: ps, required: req[p[0].Value], doc: firstParagraph(str(ps, "description"))})
		m.nested(name+camel(p[0].Value), ps)
	}
}

// nested names inline object schemas found in s (directly, as array items or as map
// values) after prefix, and records them as defs.
func (m *model) nested(prefix string, s *yaml.Node) {
	switch {
	case s == nil:
	case isObject(s):
		if _, done := inlineNames[s]; !done {
			inlineNames[s] = prefix
			m.addDef(prefix, s)
		}
	case get(s, "items") != nil:
		m.nested(prefix+"Item", get(s, "items"))
	case get(s, "additionalProperties") != nil && get(s, "additionalProperties").Kind == yaml.MappingNode:
		m.nested(prefix+"Value", get(s, "additionalProperties"))
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		for i, c := range content(get(s, k)) {
			m.nested(fmt.Sprintf("%s%d", prefix, i+1), c)
		}
	}
}

// inlineNames names the nested inline object types, by node.
var inlineNames = map[*yaml.Node]string{}

func camel(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if r == '_' || r == '-' || r == '.' || r == ' ' {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(r))
			up = false
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func firstParagraph(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	return strings.Join(strings.Fields(s), " ")
}

// wrap splits text into lines of at most width characters.
func wrap(text string, width int) []string {
	var lines []string
	var cur string
	for _, w := range strings.Fields(text) {
		if cur != "" && len(cur)+1+len(w) > width {
			lines = append(lines, cur)
			cur = w
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// lang abstracts the two output languages.
type lang interface {
	ref(name string) string
	prim(typ, format string) string
	literal(vals []string, isString bool) string
	array(elem string) string
	mapOf(elem string) string
	union(ts []string) string
	nullable(t string) string
	any() string
}

// typeOf renders schema s in language l.
func typeOf(l lang, s *yaml.Node) string {
	if s == nil {
		return l.any()
	}
	if r := str(s, "$ref"); r != "" {
		return l.ref(r[strings.LastIndex(r, "/")+1:])
	}
	if n, ok := inlineNames[s]; ok {
		return l.ref(n)
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts := get(s, k); alts != nil {
			var ts []string
			for _, c := range alts.Content {
				ts = append(ts, typeOf(l, c))
			}
			return l.union(ts)
		}
	}
	if all := get(s, "allOf"); all != nil && len(all.Content) == 1 {
		return typeOf(l, all.Content[0])
	}
	typ := get(s, "type")
	var types []string
	if typ != nil && typ.Kind == yaml.SequenceNode {
		types = scalars(typ)
	} else if typ != nil {
		types = []string{typ.Value}
	}
	null := false
	var base []string
	for _, t := range types {
		if t == "null" {
			null = true
		} else {
			base = append(base, t)
		}
	}
	var out string
	switch {
	case get(s, "const") != nil:
		c := get(s, "const")
		out = l.literal([]string{c.Value}, c.Tag != "!!int" && c.Tag != "!!bool" && c.Tag != "!!float")
	case get(s, "enum") != nil:
		e := get(s, "enum")
		isStr := len(base) == 0 || base[0] == "string"
		var vals []string
		for _, c := range e.Content {
			if c.Tag == "!!null" {
				null = true
				continue
			}
			vals = append(vals, c.Value)
		}
		out = l.literal(vals, isStr)
	case len(base) == 1 && base[0] == "array":
		out = l.array(typeOf(l, get(s, "items")))
	case len(base) == 1 && base[0] == "object", len(base) == 0 && get(s, "additionalProperties") != nil:
		ap := get(s, "additionalProperties")
		if ap != nil && ap.Kind == yaml.MappingNode && len(ap.Content) > 0 {
			out = l.mapOf(typeOf(l, ap))
		} else {
			out = l.mapOf(l.any())
		}
	case len(base) == 1:
		out = l.prim(base[0], str(s, "format"))
	case len(base) > 1:
		var ts []string
		for _, b := range base {
			ts = append(ts, l.prim(b, ""))
		}
		out = l.union(ts)
	default:
		out = l.any()
	}
	if null {
		out = l.nullable(out)
	}
	return out
}

func content(n *yaml.Node) []*yaml.Node {
	if n == nil {
		return nil
	}
	return n.Content
}

// Generate renders both SDKs' type files from the OpenAPI document src, keyed by their
// paths relative to the repository root.
func Generate(src []byte) (map[string][]byte, error) {
	inlineNames = map[*yaml.Node]string{}
	m, err := load(src)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		PythonOut: m.python(),
		TSOut:     m.typescript(),
	}, nil
}

const header = "Code generated by go run ./cmd/sdkgen from spec/openapi.yaml. DO NOT EDIT."

// ---- Python ----

type py struct{}

func (py) ref(name string) string { return name }
func (py) prim(typ, format string) string {
	switch typ {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	}
	return "Any"
}
func (py) literal(vals []string, isString bool) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		switch {
		case isString:
			q[i] = strconv.Quote(v)
		case v == "true":
			q[i] = "True"
		case v == "false":
			q[i] = "False"
		default:
			q[i] = v
		}
	}
	return "Literal[" + strings.Join(q, ", ") + "]"
}
func (py) array(e string) string    { return "list[" + e + "]" }
func (py) mapOf(e string) string    { return "dict[str, " + e + "]" }
func (py) union(ts []string) string { return strings.Join(ts, " | ") }
func (py) nullable(t string) string { return t + " | None" }
func (py) any() string              { return "Any" }

var pyKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

func pyIdent(s string) bool {
	if s == "" || pyKeywords[s] {
		return false
	}
	for i, r := range s {
		if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) || r > unicode.MaxASCII {
			return false
		}
	}
	return true
}

func find(defs []*def, name string) *def {
	for _, d := range defs {
		if d.name == name {
			return d
		}
	}
	return nil
}

func (m *model) python() []byte {
	var b bytes.Buffer
	l := py{}
	fmt.Fprintf(&b, "# %s\n", header)
	b.WriteString("\"\"\"Types of the Warden HTTP API, generated from its OpenAPI document.\n\n" +
		"Objects travel as plain dicts; these TypedDicts describe their keys.\n\"\"\"\n\n")
	b.WriteString("from __future__ import annotations\n\n")
	b.WriteString("from typing import Any, Literal, NotRequired, TypedDict\n\n")
	b.WriteString("__all__ = [\n")
	for _, d := range m.defs {
		fmt.Fprintf(&b, "    %q,\n", d.name)
	}
	b.WriteString("    \"ERROR_STATUS\",\n    \"OPERATIONS\",\n]\n")
	// Classes first (their annotations are evaluated lazily), then the aliases, each after
	// the aliases it names: an alias is evaluated when it is defined.
	names := map[string]bool{}
	for _, d := range m.defs {
		names[d.name] = true
	}
	var aliases []*def
	for _, d := range m.defs {
		if !d.object {
			aliases = append(aliases, d)
		}
	}
	done := map[string]bool{}
	emitAliases := func() {
		for len(aliases) > 0 {
			progress := false
			for i := 0; i < len(aliases); i++ {
				d := aliases[i]
				t := typeOf(l, d.alias)
				ready := true
				for _, w := range strings.FieldsFunc(t, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }) {
					if names[w] && !done[w] {
						if a := find(m.defs, w); a != nil && !a.object {
							ready = false
						}
					}
				}
				if !ready {
					continue
				}
				b.WriteString("\n")
				for _, ln := range wrap(d.doc, 94) {
					fmt.Fprintf(&b, "# %s\n", ln)
				}
				fmt.Fprintf(&b, "%s = %s\n", d.name, t)
				done[d.name] = true
				aliases = append(aliases[:i], aliases[i+1:]...)
				i--
				progress = true
			}
			if !progress { // a cycle: cannot happen in a valid spec; emit as Any
				for _, d := range aliases {
					fmt.Fprintf(&b, "\n%s = Any\n", d.name)
				}
				aliases = nil
			}
		}
	}
	for _, d := range m.defs {
		if !d.object {
			continue
		}
		b.WriteString("\n")
		ident := true
		for _, f := range d.fields {
			if !pyIdent(f.name) {
				ident = false
			}
		}
		ftype := func(f field) string {
			t := typeOf(l, f.typ)
			if !f.required {
				t = "NotRequired[" + t + "]"
			}
			return t
		}
		if !ident {
			b.WriteString("\n")
			for _, ln := range wrap(d.doc, 94) {
				fmt.Fprintf(&b, "# %s\n", ln)
			}
			fmt.Fprintf(&b, "%s = TypedDict(\n    %q,\n    {\n", d.name, d.name)
			for _, f := range d.fields {
				fmt.Fprintf(&b, "        %q: %q,\n", f.name, ftype(f))
			}
			b.WriteString("    },\n)\n")
			continue
		}
		fmt.Fprintf(&b, "\nclass %s(TypedDict):\n", d.name)
		if d.doc != "" {
			doc := strings.ReplaceAll(strings.ReplaceAll(d.doc, `\`, `\\`), `"""`, `\"\"\"`)
			lines := wrap(doc, 88)
			if len(lines) == 1 {
				fmt.Fprintf(&b, "    \"\"\"%s\"\"\"\n\n", lines[0])
			} else {
				b.WriteString("    \"\"\"")
				for i, ln := range lines {
					if i > 0 {
						b.WriteString("    ")
					}
					b.WriteString(ln + "\n")
				}
				b.WriteString("    \"\"\"\n\n")
			}
		}
		if len(d.fields) == 0 {
			b.WriteString("    pass\n")
		}
		for _, f := range d.fields {
			for _, ln := range wrap(f.doc, 88) {
				fmt.Fprintf(&b, "    #: %s\n", ln)
			}
			fmt.Fprintf(&b, "    %s: %s\n", f.name, ftype(f))
		}
	}
	emitAliases()
	b.WriteString("\n#: HTTP status of each stable error code.\nERROR_STATUS: dict[str, int] = {\n")
	for _, e := range m.errStatus {
		fmt.Fprintf(&b, "    %q: %s,\n", e[0], e[1])
	}
	b.WriteString("}\n\n#: Every operation of the API: operationId -> (method, path).\nOPERATIONS: dict[str, tuple[str, str]] = {\n")
	for _, o := range m.operations {
		fmt.Fprintf(&b, "    %q: (%q, %q),\n", o.id, o.method, o.path)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// ---- TypeScript ----

type ts struct{}

func (ts) ref(name string) string { return name }
func (ts) prim(typ, format string) string {
	switch typ {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	}
	return "unknown"
}
func (ts) literal(vals []string, isString bool) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		if isString {
			q[i] = strconv.Quote(v)
		} else {
			q[i] = v
		}
	}
	return strings.Join(q, " | ")
}
func (ts) array(e string) string {
	if strings.ContainsAny(e, " |") {
		return "Array<" + e + ">"
	}
	return e + "[]"
}
func (ts) mapOf(e string) string    { return "Record<string, " + e + ">" }
func (ts) union(t []string) string  { return strings.Join(t, " | ") }
func (ts) nullable(t string) string { return t + " | null" }
func (ts) any() string              { return "unknown" }

func tsDoc(b *bytes.Buffer, indent, doc string) {
	if doc == "" {
		return
	}
	doc = strings.ReplaceAll(doc, "*/", "*\\/")
	lines := wrap(doc, 90)
	if len(lines) == 1 {
		fmt.Fprintf(b, "%s/** %s */\n", indent, lines[0])
		return
	}
	fmt.Fprintf(b, "%s/**\n", indent)
	for _, ln := range lines {
		fmt.Fprintf(b, "%s * %s\n", indent, ln)
	}
	fmt.Fprintf(b, "%s */\n", indent)
}

func tsKey(s string) string {
	ok := s != ""
	for i, r := range s {
		if !(r == '_' || r == '$' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) || r > unicode.MaxASCII {
			ok = false
		}
	}
	if ok {
		return s
	}
	return strconv.Quote(s)
}

func (m *model) typescript() []byte {
	var b bytes.Buffer
	l := ts{}
	fmt.Fprintf(&b, "// %s\n", header)
	b.WriteString("// Types of the Warden HTTP API, generated from its OpenAPI document.\n")
	for _, d := range m.defs {
		b.WriteString("\n")
		tsDoc(&b, "", d.doc)
		if !d.object {
			fmt.Fprintf(&b, "export type %s = %s;\n", d.name, typeOf(l, d.alias))
			continue
		}
		fmt.Fprintf(&b, "export interface %s {\n", d.name)
		for _, f := range d.fields {
			tsDoc(&b, "  ", f.doc)
			opt := ""
			if !f.required {
				opt = "?"
			}
			fmt.Fprintf(&b, "  %s%s: %s;\n", tsKey(f.name), opt, typeOf(l, f.typ))
		}
		b.WriteString("}\n")
	}
	b.WriteString("\n/** HTTP status of each stable error code. */\nexport const ERROR_STATUS: Readonly<Record<string, number>> = {\n")
	for _, e := range m.errStatus {
		fmt.Fprintf(&b, "  %s: %s,\n", tsKey(e[0]), e[1])
	}
	b.WriteString("};\n\n/** Every operation of the API: operationId -> [method, path]. */\n" +
		"export const OPERATIONS: Readonly<Record<string, readonly [string, string]>> = {\n")
	for _, o := range m.operations {
		fmt.Fprintf(&b, "  %s: [%q, %q],\n", tsKey(o.id), o.method, o.path)
	}
	b.WriteString("};\n")
	return b.Bytes()
}
