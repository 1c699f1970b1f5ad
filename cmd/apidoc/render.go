package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// methods lists the HTTP methods a path item may hold, in OpenAPI's order.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operation is one method on one path.
type operation struct {
	method string
	path   string
	item   *yaml.Node // the path item, for path-level parameters
	op     *yaml.Node
}

func (o operation) id() string { return str(o.op, "operationId") }

// renderer writes the Markdown reference for one OpenAPI document.
type renderer struct {
	root *yaml.Node
	res  resolver
	buf  bytes.Buffer
	err  error
}

// Render returns the Markdown API reference for the OpenAPI document src.
func Render(src []byte) ([]byte, error) {
	r, err := newRenderer(src)
	if err != nil {
		return nil, err
	}
	ops, err := r.operations()
	if err != nil {
		return nil, err
	}
	r.header(ops)
	r.overview()
	r.auth()
	r.errorsSection()
	r.tagSections(ops)
	r.schemas()
	if r.err != nil {
		return nil, r.err
	}
	out := bytes.TrimRight(r.buf.Bytes(), "\n")
	return append(out, '\n'), nil
}

// newRenderer parses the OpenAPI document src.
func newRenderer(src []byte) (*renderer, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("parse spec: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("parse spec: top level is not a mapping")
	}
	root := doc.Content[0]
	return &renderer{root: root, res: resolver{root: root}}, nil
}

func (r *renderer) fail(err error) {
	if r.err == nil && err != nil {
		r.err = err
	}
}

func (r *renderer) p(format string, args ...any) {
	fmt.Fprintf(&r.buf, format, args...)
}

// para writes a block of Markdown text followed by a blank line.
func (r *renderer) para(text string) {
	text = strings.TrimSpace(text)
	if text == "" {
		return
	}
	r.p("%s\n\n", text)
}

// operations lists every operation in document order.
func (r *renderer) operations() ([]operation, error) {
	paths := get(r.root, "paths")
	if paths == nil {
		return nil, errors.New("spec has no paths")
	}
	var ops []operation
	var err error
	pairs(paths, func(path string, item *yaml.Node) {
		pairs(item, func(key string, op *yaml.Node) {
			if !slices.Contains(methods, key) {
				return
			}
			if str(op, "operationId") == "" && err == nil {
				err = fmt.Errorf("%s %s: no operationId", strings.ToUpper(key), path)
			}
			ops = append(ops, operation{method: key, path: path, item: item, op: op})
		})
	})
	return ops, err
}

// tags returns the declared tag names in order, then any undeclared ones used by operations.
func (r *renderer) tags(ops []operation) []string {
	var names []string
	for _, t := range items(get(r.root, "tags")) {
		names = append(names, str(t, "name"))
	}
	for _, o := range ops {
		for _, t := range scalars(get(o.op, "tags")) {
			if !slices.Contains(names, t) {
				names = append(names, t)
			}
		}
	}
	return names
}

func (r *renderer) tagDescription(name string) string {
	for _, t := range items(get(r.root, "tags")) {
		if str(t, "name") == name {
			return str(t, "description")
		}
	}
	return ""
}

// opsByTag returns the operations whose first tag is tag.
func opsByTag(ops []operation, tag string) []operation {
	var out []operation
	for _, o := range ops {
		if ts := scalars(get(o.op, "tags")); len(ts) > 0 && ts[0] == tag {
			out = append(out, o)
		}
	}
	return out
}

func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func opAnchor(o operation) string { return "op-" + strings.ToLower(o.id()) }

func schemaAnchor(name string) string { return "schema-" + strings.ToLower(name) }

func schemaLink(name string) string { return fmt.Sprintf("[%s](#%s)", name, schemaAnchor(name)) }

func (r *renderer) header(ops []operation) {
	info := get(r.root, "info")
	r.p("# %s\n\n", str(info, "title"))
	r.p("<!-- Generated from spec/openapi.yaml by `go run ./cmd/apidoc`. DO NOT EDIT. -->\n\n")
	r.p("API version %s (OpenAPI %s). %s\n\n", str(info, "version"), str(r.root, "openapi"), str(info, "summary"))
	r.p("## Contents\n\n")
	r.p("- [Overview](#overview)\n- [Authentication](#authentication)\n- [Errors](#errors)\n")
	for _, tag := range r.tags(ops) {
		r.p("- [%s](#tag-%s)\n", title(tag), tag)
		for _, o := range opsByTag(ops, tag) {
			r.p("  - [`%s %s`](#%s): %s\n", strings.ToUpper(o.method), o.path, opAnchor(o), str(o.op, "summary"))
		}
	}
	r.p("- [Schemas](#schemas)\n\n")
}

func (r *renderer) overview() {
	r.p("## Overview\n\n")
	r.para(str(get(r.root, "info"), "description"))
	if servers := items(get(r.root, "servers")); len(servers) > 0 {
		r.p("Servers:\n\n")
		for _, s := range servers {
			r.p("- `%s`: %s\n", str(s, "url"), str(s, "description"))
		}
		r.p("\n")
	}
}

func (r *renderer) auth() {
	r.p("## Authentication\n\n")
	pairs(get(get(r.root, "components"), "securitySchemes"), func(name string, s *yaml.Node) {
		kind := str(s, "type")
		if kind == "http" {
			kind = "HTTP " + str(s, "scheme")
		}
		r.p("Scheme `%s`: %s", name, kind)
		if f := str(s, "bearerFormat"); f != "" {
			r.p(", token format `%s`", f)
		}
		r.p(".\n\n")
		r.para(str(s, "description"))
	})
	r.p("Operations marked \"no authentication\" take no `Authorization` header.\n\n")
	scope, err := r.res.lookup("#/components/schemas/Scope")
	if err != nil {
		return // a spec without scopes documents none
	}
	r.para(str(scope, "description"))
	r.p("Scopes: %s.\n\n", codeList(scalars(get(scope, "enum"))))
}

func (r *renderer) errorsSection() {
	r.p("## Errors\n\n")
	errSchema, err := r.res.lookup("#/components/schemas/Error")
	if err != nil {
		r.fail(fmt.Errorf("errors section: %w", err))
		return
	}
	r.para(str(errSchema, "description"))
	r.p("See %s. Example:\n\n", schemaLink("Error"))
	r.codeBlock("json", r.exampleJSON(errSchema))
	codes, err := r.res.lookup("#/components/schemas/ErrorCode")
	if err != nil {
		r.fail(fmt.Errorf("errors section: %w", err))
		return
	}
	r.para(str(codes, "description"))
	status := get(codes, "x-status")
	desc := get(codes, "x-descriptions")
	r.p("| Code | HTTP status | Meaning |\n|---|---|---|\n")
	for _, c := range scalars(get(codes, "enum")) {
		r.p("| `%s` | %s | %s |\n", c, str(status, c), cell(str(desc, c)))
	}
	r.p("\n")
}

func (r *renderer) tagSections(ops []operation) {
	for _, tag := range r.tags(ops) {
		r.p("<a id=\"tag-%s\"></a>\n\n## %s\n\n", tag, title(tag))
		r.para(r.tagDescription(tag))
		for _, o := range opsByTag(ops, tag) {
			r.operation(o)
		}
	}
}

func (r *renderer) operation(o operation) {
	r.p("<a id=\"%s\"></a>\n\n### `%s %s`\n\n", opAnchor(o), strings.ToUpper(o.method), o.path)
	r.p("**%s.** Operation `%s`. Auth: %s.", str(o.op, "summary"), o.id(), r.security(o.op))
	if str(o.op, "x-idempotent") == "true" {
		r.p(" Safe to retry.")
	}
	r.p("\n\n")
	r.para(str(o.op, "description"))
	if ws := get(o.op, "x-websocket"); ws != nil {
		r.p("WebSocket text messages: client to server %s; server to client %s.\n\n",
			r.typeOf(get(ws, "client-text")), r.typeOf(get(ws, "server-text")))
	}
	r.parameters(o)
	r.requestBody(o)
	r.responses(o)
	r.curl(o)
}

// security describes who may call op.
func (r *renderer) security(op *yaml.Node) string {
	sec := get(op, "security")
	if sec == nil {
		sec = get(r.root, "security")
	}
	reqs := items(sec)
	if len(reqs) == 0 {
		return "no authentication"
	}
	var alts []string
	for _, req := range reqs {
		var parts []string
		pairs(req, func(scheme string, scopes *yaml.Node) {
			s := "API key"
			if scheme != "apiKey" {
				s = "`" + scheme + "`"
			}
			if sc := scalars(scopes); len(sc) > 0 {
				noun := "scope"
				if len(sc) > 1 {
					noun = "scopes"
				}
				s += " with " + noun + " " + codeList(sc)
			}
			parts = append(parts, s)
		})
		if len(parts) == 0 {
			parts = append(parts, "none")
		}
		alts = append(alts, strings.Join(parts, " and "))
	}
	return strings.Join(alts, ", or ")
}

// params merges path-level and operation-level parameters, the latter overriding.
func (r *renderer) params(o operation) []*yaml.Node {
	var out []*yaml.Node
	add := func(list *yaml.Node) {
		for _, p := range items(list) {
			p, err := r.res.deref(p)
			if err != nil {
				r.fail(fmt.Errorf("%s: %w", o.id(), err))
				continue
			}
			i := slices.IndexFunc(out, func(q *yaml.Node) bool {
				return str(q, "name") == str(p, "name") && str(q, "in") == str(p, "in")
			})
			if i >= 0 {
				out[i] = p
			} else {
				out = append(out, p)
			}
		}
	}
	add(get(o.item, "parameters"))
	add(get(o.op, "parameters"))
	return out
}

func (r *renderer) parameters(o operation) {
	ps := r.params(o)
	if len(ps) == 0 {
		return
	}
	r.p("Parameters:\n\n| Name | In | Type | Required | Description |\n|---|---|---|---|---|\n")
	for _, p := range ps {
		req := "no"
		if str(p, "required") == "true" {
			req = "yes"
		}
		s := get(p, "schema")
		desc := joinNotes(str(p, "description"), r.notes(s))
		if ex := get(p, "example"); ex != nil && ex.Kind == yaml.ScalarNode && ex.Value != "" {
			desc = joinNotes(desc, []string{"Example: `" + ex.Value + "`."})
		}
		r.p("| `%s` | %s | %s | %s | %s |\n", str(p, "name"), str(p, "in"), r.typeOf(s), req, cell(desc))
	}
	r.p("\n")
}

func (r *renderer) requestBody(o operation) {
	body, err := r.res.deref(get(o.op, "requestBody"))
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", o.id(), err))
		return
	}
	if body == nil {
		return
	}
	req := "optional"
	if str(body, "required") == "true" {
		req = "required"
	}
	pairs(get(body, "content"), func(ct string, media *yaml.Node) {
		r.p("Request body (`%s`, %s): %s.\n\n", ct, req, r.bodyDescription(ct, get(media, "schema")))
		r.para(str(body, "description"))
		if ex := r.mediaExample(ct, media); ex != "" {
			r.p("Example request body:\n\n")
			r.codeBlock(fenceFor(ct), ex)
		}
	})
}

func (r *renderer) responses(o operation) {
	r.p("Responses:\n\n| Status | Description | Body |\n|---|---|---|\n")
	type example struct{ status, ct, text string }
	var first *example
	pairs(get(o.op, "responses"), func(status string, resp *yaml.Node) {
		name := refName(resp)
		resp, err := r.res.deref(resp)
		if err != nil {
			r.fail(fmt.Errorf("%s %s: %w", o.id(), status, err))
			return
		}
		var bodies []string
		pairs(get(resp, "content"), func(ct string, media *yaml.Node) {
			bodies = append(bodies, fmt.Sprintf("`%s` %s", ct, r.bodyDescription(ct, get(media, "schema"))))
			if first == nil && strings.HasPrefix(status, "2") {
				if ex := r.mediaExample(ct, media); ex != "" {
					first = &example{status, ct, ex}
				}
			}
		})
		body := strings.Join(bodies, "; ")
		if body == "" {
			body = "none"
		}
		desc := str(resp, "description")
		if name != "" {
			desc = strings.TrimSpace(desc)
		}
		r.p("| %s | %s | %s |\n", status, cell(desc), cell(body))
	})
	r.p("\n")
	if first != nil {
		r.p("Example response (%s, `%s`):\n\n", first.status, first.ct)
		r.codeBlock(fenceFor(first.ct), first.text)
	}
}

// curl writes an example command line for o, except for WebSocket upgrades.
func (r *renderer) curl(o operation) {
	if get(get(o.op, "responses"), "101") != nil {
		return
	}
	base := "http://127.0.0.1:7070"
	if s := items(get(r.root, "servers")); len(s) > 0 {
		base = str(s[0], "url")
	}
	path := o.path
	var query []string
	for _, p := range r.params(o) {
		if str(p, "required") != "true" {
			continue
		}
		val := r.paramExample(p)
		switch str(p, "in") {
		case "path":
			path = strings.ReplaceAll(path, "{"+str(p, "name")+"}", val)
		case "query":
			query = append(query, url.QueryEscape(str(p, "name"))+"="+url.QueryEscape(val))
		}
	}
	if len(query) > 0 {
		path += "?" + strings.Join(query, "&")
	}
	args := []string{"curl -sS"}
	if r.isStream(o) {
		args = append(args, "-N")
	}
	if o.method != "get" {
		args = append(args, "-X "+strings.ToUpper(o.method))
	}
	if r.security(o.op) != "no authentication" {
		args = append(args, `-H "Authorization: Bearer $WARDEN_API_KEY"`)
	}
	if body, _ := r.res.deref(get(o.op, "requestBody")); body != nil {
		pairs(get(body, "content"), func(ct string, media *yaml.Node) {
			args = append(args, "-H 'Content-Type: "+ct+"'")
			switch ct {
			case "application/json":
				ex := r.mediaExample(ct, media)
				if c, err := compactText(ex); err == nil {
					ex = c
				}
				args = append(args, "-d '"+ex+"'")
			case "application/x-tar":
				args = append(args, "--data-binary @archive.tar")
			default:
				args = append(args, "--data-binary @file")
			}
		})
	}
	args = append(args, "'"+base+path+"'")
	r.p("Example:\n\n")
	r.codeBlock("sh", strings.Join(args, " "))
}

// isStream reports whether o answers with NDJSON.
func (r *renderer) isStream(o operation) bool {
	stream := false
	pairs(get(o.op, "responses"), func(_ string, resp *yaml.Node) {
		if resp, _ := r.res.deref(resp); get(get(resp, "content"), "application/x-ndjson") != nil {
			stream = true
		}
	})
	return stream
}

// paramExample returns an example value for a parameter.
func (r *renderer) paramExample(p *yaml.Node) string {
	if ex := get(p, "example"); ex != nil {
		return ex.Value
	}
	s, _ := r.res.deref(get(p, "schema"))
	if ex := r.example(s, 0); ex != nil && ex.Kind == yaml.ScalarNode {
		return ex.Value
	}
	return "x"
}

// bodyDescription names what a body of media type ct and schema s holds.
func (r *renderer) bodyDescription(ct string, s *yaml.Node) string {
	switch {
	case ct == "application/x-ndjson":
		return "stream, each line a " + r.typeOf(s)
	case ct == "application/octet-stream":
		return "raw bytes"
	case ct == "application/x-tar":
		return "tar archive"
	case strings.HasPrefix(ct, "text/") || ct == "application/yaml":
		return "text"
	}
	return r.typeOf(s)
}

// mediaExample returns the example of a media type object as text: its own example, or
// one synthesized from its schema.
func (r *renderer) mediaExample(ct string, media *yaml.Node) string {
	if ex := get(media, "example"); ex != nil {
		if ex.Kind == yaml.ScalarNode && ex.ShortTag() == "!!str" {
			return strings.TrimRight(ex.Value, "\n")
		}
		out, err := prettyJSON(ex)
		r.fail(err)
		return out
	}
	if ex := get(media, "examples"); ex != nil {
		for i := 0; i+1 < len(ex.Content); i += 2 {
			if v := get(ex.Content[i+1], "value"); v != nil {
				out, err := prettyJSON(v)
				r.fail(err)
				return out
			}
		}
	}
	s := get(media, "schema")
	switch ct {
	case "application/json":
		return r.exampleJSON(s)
	case "application/x-ndjson":
		// One line per alternative of the event schema.
		ds, err := r.res.deref(s)
		if err != nil {
			r.fail(err)
			return ""
		}
		alts := items(get(ds, "oneOf"))
		if len(alts) == 0 {
			alts = []*yaml.Node{ds}
		}
		var lines []string
		for _, alt := range alts {
			line, err := compactJSON(r.example(alt, 0))
			r.fail(err)
			lines = append(lines, line)
		}
		return strings.Join(lines, "\n")
	}
	return ""
}

func (r *renderer) exampleJSON(s *yaml.Node) string {
	out, err := prettyJSON(r.example(s, 0))
	r.fail(err)
	return out
}

// example synthesizes an example value for schema s from its examples, consts, enums,
// defaults and types.
func (r *renderer) example(s *yaml.Node, depth int) *yaml.Node {
	if s == nil || depth > 12 {
		return scalarNode("!!null", "null")
	}
	if ex := get(s, "example"); ex != nil {
		return ex
	}
	if ref := str(s, "$ref"); ref != "" {
		t, err := r.res.lookup(ref)
		if err != nil {
			r.fail(err)
			return scalarNode("!!null", "null")
		}
		return r.example(t, depth+1)
	}
	for _, k := range []string{"const", "default"} {
		if v := get(s, k); v != nil {
			return v
		}
	}
	if e := items(get(s, "enum")); len(e) > 0 {
		return e[0]
	}
	if alts := items(get(s, "oneOf")); len(alts) > 0 && get(s, "properties") == nil {
		return r.example(alts[0], depth+1)
	}
	switch r.firstType(s) {
	case "object":
		m := mapNode()
		pairs(get(s, "properties"), func(name string, ps *yaml.Node) {
			addPair(m, name, r.example(ps, depth+1))
		})
		return m
	case "array":
		return seqNode(r.example(get(s, "items"), depth+1))
	case "string":
		return scalarNode("!!str", "")
	case "integer", "number":
		return scalarNode("!!int", "0")
	case "boolean":
		return scalarNode("!!bool", "false")
	}
	return scalarNode("!!null", "null")
}

// firstType returns the schema's type, the first non-null one of a type list, or "object"
// for schemas with properties.
func (r *renderer) firstType(s *yaml.Node) string {
	t := get(s, "type")
	switch {
	case t == nil:
		if get(s, "properties") != nil {
			return "object"
		}
		return ""
	case t.Kind == yaml.SequenceNode:
		for _, v := range scalars(t) {
			if v != "null" {
				return v
			}
		}
		return "null"
	}
	return t.Value
}

// typeOf describes schema s in a few words, linking named schemas.
func (r *renderer) typeOf(s *yaml.Node) string {
	if s == nil {
		return "any"
	}
	if name := refName(s); name != "" {
		return schemaLink(name)
	}
	if alts := items(get(s, "oneOf")); len(alts) > 0 && get(s, "properties") == nil {
		var names []string
		for _, a := range alts {
			names = append(names, r.typeOf(a))
		}
		return "one of " + strings.Join(names, ", ")
	}
	t := get(s, "type")
	var types []string
	switch {
	case t == nil && get(s, "properties") != nil:
		types = []string{"object"}
	case t == nil:
		return "any"
	case t.Kind == yaml.SequenceNode:
		types = scalars(t)
	default:
		types = []string{t.Value}
	}
	for i, typ := range types {
		switch typ {
		case "array":
			types[i] = "array of " + r.typeOf(get(s, "items"))
		case "object":
			if ap := get(s, "additionalProperties"); ap != nil && ap.Kind == yaml.MappingNode {
				types[i] = "map of string to " + r.typeOf(ap)
			}
		case "string":
			if f := str(s, "format"); f != "" {
				types[i] = "string (" + f + ")"
			} else if e := str(s, "contentEncoding"); e != "" {
				types[i] = "string (" + e + ")"
			}
		case "integer":
			if f := str(s, "format"); f != "" {
				types[i] = "integer (" + f + ")"
			}
		}
	}
	return strings.Join(types, " or ")
}

// notes lists the constraints of schema s as short sentences.
func (r *renderer) notes(s *yaml.Node) []string {
	if s == nil {
		return nil
	}
	var out []string
	if c := get(s, "const"); c != nil {
		out = append(out, "Always `"+c.Value+"`.")
	}
	if e := scalars(get(s, "enum")); len(e) > 0 {
		out = append(out, "One of "+codeList(e)+".")
	}
	lo, hi := str(s, "minimum"), str(s, "maximum")
	switch {
	case lo != "" && hi != "":
		out = append(out, "From "+lo+" to "+hi+".")
	case lo != "":
		out = append(out, "At least "+lo+".")
	case hi != "":
		out = append(out, "At most "+hi+".")
	}
	switch v := str(s, "minItems"); v {
	case "":
	case "1":
		out = append(out, "Not empty.")
	default:
		out = append(out, "At least "+v+" items.")
	}
	if v := str(s, "maxProperties"); v != "" {
		out = append(out, "At most "+v+" keys.")
	}
	if v := str(get(s, "propertyNames"), "maxLength"); v != "" {
		out = append(out, "Keys at most "+v+" bytes.")
	}
	if ap := get(s, "additionalProperties"); ap != nil && ap.Kind == yaml.MappingNode {
		if v := str(ap, "maxLength"); v != "" {
			out = append(out, "Values at most "+v+" bytes.")
		}
	}
	if v := str(s, "maxLength"); v != "" {
		out = append(out, "At most "+v+" bytes.")
	}
	if v := str(s, "pattern"); v != "" {
		out = append(out, "Pattern `"+v+"`.")
	}
	if d := get(s, "default"); d != nil {
		v := d.Value
		if d.Kind != yaml.ScalarNode {
			v, _ = compactJSON(d)
		}
		out = append(out, "Default `"+v+"`.")
	}
	return out
}

func (r *renderer) schemas() {
	r.p("## Schemas\n\n")
	pairs(get(get(r.root, "components"), "schemas"), func(name string, s *yaml.Node) {
		r.p("<a id=\"%s\"></a>\n\n### %s\n\n", schemaAnchor(name), name)
		r.para(str(s, "description"))
		if get(s, "x-status") != nil {
			r.p("Values and their HTTP statuses: see [Errors](#errors).\n\n")
		} else if e := scalars(get(s, "enum")); len(e) > 0 {
			r.p("Values: %s.\n\n", codeList(e))
		}
		if alts := items(get(s, "oneOf")); len(alts) > 0 {
			r.oneOf(s, alts)
		}
		r.properties(s)
	})
}

func (r *renderer) oneOf(s *yaml.Node, alts []*yaml.Node) {
	var names, required []string
	for _, a := range alts {
		if n := refName(a); n != "" {
			names = append(names, schemaLink(n))
		} else if req := scalars(get(a, "required")); len(req) > 0 && len(a.Content) == 2 {
			required = append(required, "`"+strings.Join(req, "` + `")+"`")
		}
	}
	if len(required) > 0 {
		r.p("Exactly one of %s is required.\n\n", strings.Join(required, ", "))
	}
	if len(names) == 0 {
		return
	}
	r.p("One of %s.\n\n", strings.Join(names, ", "))
	d := get(s, "discriminator")
	if d == nil {
		return
	}
	r.p("`%s` selects the shape:\n\n| `%s` | Schema |\n|---|---|\n", str(d, "propertyName"), str(d, "propertyName"))
	pairs(get(d, "mapping"), func(v string, ref *yaml.Node) {
		r.p("| `%s` | %s |\n", v, schemaLink(ref.Value[strings.LastIndex(ref.Value, "/")+1:]))
	})
	r.p("\n")
}

func (r *renderer) properties(s *yaml.Node) {
	props := get(s, "properties")
	if props == nil {
		return
	}
	required := scalars(get(s, "required"))
	r.p("| Field | Type | Required | Description |\n|---|---|---|---|\n")
	pairs(props, func(name string, ps *yaml.Node) {
		req := "no"
		if slices.Contains(required, name) {
			req = "yes"
		}
		desc := str(ps, "description")
		if refName(ps) != "" && desc == "" {
			if t, err := r.res.deref(ps); err == nil && get(t, "properties") == nil {
				desc = firstSentence(str(t, "description"))
			}
		}
		if sub := get(ps, "properties"); sub != nil && refName(ps) == "" {
			// Inline object: list its fields in the description.
			var fields []string
			pairs(sub, func(n string, fs *yaml.Node) {
				fields = append(fields, "`"+n+"` ("+r.typeOf(fs)+")")
			})
			desc = joinNotes(desc, []string{"Fields: " + strings.Join(fields, ", ") + "."})
		}
		r.p("| `%s` | %s | %s | %s |\n", name, r.typeOf(ps), req, cell(joinNotes(desc, r.notes(ps))))
	})
	r.p("\n")
}

func (r *renderer) codeBlock(lang, text string) {
	r.p("```%s\n%s\n```\n\n", lang, strings.TrimRight(text, "\n"))
}

func fenceFor(ct string) string {
	switch ct {
	case "application/json", "application/x-ndjson":
		return "json"
	case "application/yaml":
		return "yaml"
	}
	return "text"
}

// compactText re-renders a JSON text on one line.
func compactText(s string) (string, error) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil {
		return "", err
	}
	return compactJSON(&n)
}

func codeList(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = "`" + v + "`"
	}
	return strings.Join(q, ", ")
}

func joinNotes(desc string, notes []string) string {
	parts := []string{}
	if d := strings.TrimSpace(desc); d != "" {
		if !strings.HasSuffix(d, ".") && !strings.HasSuffix(d, ")") {
			d += "."
		}
		parts = append(parts, d)
	}
	return strings.Join(append(parts, notes...), " ")
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// cell makes text safe for one Markdown table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
