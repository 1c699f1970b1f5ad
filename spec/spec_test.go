package spec_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/spec"
	"go.yaml.in/yaml/v3"
)

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

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

func pairs(n *yaml.Node, fn func(string, *yaml.Node)) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		fn(n.Content[i].Value, n.Content[i+1])
	}
}

func seq(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func scalars(n *yaml.Node) []string {
	var out []string
	if n != nil && n.Kind == yaml.SequenceNode {
		for _, c := range n.Content {
			out = append(out, c.Value)
		}
	}
	return out
}

// lookup resolves a local JSON pointer such as "#/components/schemas/Sandbox".
func lookup(root *yaml.Node, ref string) (*yaml.Node, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("%q is not a local reference", ref)
	}
	n := root
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n.Kind {
		case yaml.MappingNode:
			n = get(n, tok)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				n = nil
			} else {
				n = n.Content[i]
			}
		default:
			n = nil
		}
		if n == nil {
			return nil, fmt.Errorf("%q does not resolve", ref)
		}
	}
	return n, nil
}

func deref(t *testing.T, root, n *yaml.Node) *yaml.Node {
	t.Helper()
	for ref := str(n, "$ref"); ref != ""; ref = str(n, "$ref") {
		var err error
		if n, err = lookup(root, ref); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func load(t *testing.T) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(spec.OpenAPI, &doc); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatal("openapi.yaml: top level is not a mapping")
	}
	return doc.Content[0]
}

type op struct {
	method, path string
	item, node   *yaml.Node
}

func (o op) String() string { return strings.ToUpper(o.method) + " " + o.path }

func operations(root *yaml.Node) []op {
	var ops []op
	pairs(get(root, "paths"), func(path string, item *yaml.Node) {
		pairs(item, func(m string, n *yaml.Node) {
			if slices.Contains(httpMethods, m) {
				ops = append(ops, op{m, path, item, n})
			}
		})
	})
	return ops
}

func TestEmbeddedMatchesFile(t *testing.T) {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(spec.OpenAPI) {
		t.Fatal("spec.OpenAPI differs from openapi.yaml")
	}
}

func TestVersion(t *testing.T) {
	root := load(t)
	if v := str(root, "openapi"); v != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", v)
	}
	if str(get(root, "info"), "version") == "" {
		t.Error("info.version is empty")
	}
}

// TestRefsResolve walks the whole document and resolves every $ref.
func TestRefsResolve(t *testing.T) {
	root := load(t)
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			if ref := get(n, "$ref"); ref != nil {
				if _, err := lookup(root, ref.Value); err != nil {
					t.Errorf("line %d: %v", ref.Line, err)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	// Discriminator mappings hold references as plain strings.
	pairs(get(get(root, "components"), "schemas"), func(name string, s *yaml.Node) {
		pairs(get(get(s, "discriminator"), "mapping"), func(v string, ref *yaml.Node) {
			if _, err := lookup(root, ref.Value); err != nil {
				t.Errorf("schema %s discriminator %q: %v", name, v, err)
			}
		})
	})
}

func TestOperations(t *testing.T) {
	root := load(t)
	var tags []string
	for _, tg := range get(root, "tags").Content {
		tags = append(tags, str(tg, "name"))
	}
	scopes := scalars(get(get(get(get(root, "components"), "schemas"), "Scope"), "enum"))
	if len(scopes) == 0 {
		t.Fatal("no Scope enum")
	}
	ids := map[string]string{}
	ops := operations(root)
	if len(ops) == 0 {
		t.Fatal("no operations")
	}
	for _, o := range ops {
		id := str(o.node, "operationId")
		if id == "" {
			t.Errorf("%s: no operationId", o)
		} else if prev, dup := ids[id]; dup {
			t.Errorf("%s: operationId %q also used by %s", o, id, prev)
		}
		ids[id] = o.String()
		if str(o.node, "summary") == "" {
			t.Errorf("%s: no summary", o)
		}
		opTags := scalars(get(o.node, "tags"))
		if len(opTags) == 0 {
			t.Errorf("%s: no tag", o)
		}
		for _, tg := range opTags {
			if !slices.Contains(tags, tg) {
				t.Errorf("%s: tag %q is not declared", o, tg)
			}
		}

		sec := get(o.node, "security")
		if sec == nil {
			t.Errorf("%s: no explicit security requirement", o)
		}
		authenticated := sec != nil && len(sec.Content) > 0
		if sec != nil {
			for _, req := range sec.Content {
				pairs(req, func(scheme string, sc *yaml.Node) {
					if get(get(get(root, "components"), "securitySchemes"), scheme) == nil {
						t.Errorf("%s: unknown security scheme %q", o, scheme)
					}
					for _, s := range scalars(sc) {
						if !slices.Contains(scopes, s) {
							t.Errorf("%s: unknown scope %q", o, s)
						}
					}
				})
			}
		}

		// Responses: at least one success, documented errors, X-Request-Id everywhere.
		var success, errs []string
		pairs(get(o.node, "responses"), func(status string, resp *yaml.Node) {
			code, err := strconv.Atoi(status)
			if err != nil {
				t.Errorf("%s: response %q is not a status code", o, status)
				return
			}
			r := deref(t, root, resp)
			if str(r, "description") == "" {
				t.Errorf("%s %s: no description", o, status)
			}
			if get(get(r, "headers"), "X-Request-Id") == nil {
				t.Errorf("%s %s: no X-Request-Id header", o, status)
			}
			if code >= 400 {
				errs = append(errs, status)
				media := get(get(r, "content"), "application/json")
				if str(get(media, "schema"), "$ref") != "#/components/schemas/Error" {
					t.Errorf("%s %s: error body is not the Error schema", o, status)
				}
			} else {
				success = append(success, status)
			}
		})
		if len(success) == 0 {
			t.Errorf("%s: no success response", o)
		}
		if len(errs) == 0 {
			t.Errorf("%s: no documented error responses", o)
		}
		if authenticated && !slices.Contains(errs, "401") {
			t.Errorf("%s: authenticated but 401 is not documented", o)
		}
		if strings.Contains(o.path, "{id}") && !slices.Contains(errs, "404") {
			t.Errorf("%s: has {id} but 404 is not documented", o)
		}
		if get(o.node, "requestBody") != nil && !slices.Contains(errs, "400") && !slices.Contains(errs, "413") {
			t.Errorf("%s: takes a body but documents neither 400 nor 413", o)
		}
	}
}

// TestPathParameters checks that every {param} in a path is declared as a required path
// parameter and that no path parameter is declared without being used.
func TestPathParameters(t *testing.T) {
	root := load(t)
	re := regexp.MustCompile(`\{([^}]+)\}`)
	for _, o := range operations(root) {
		declared := map[string]bool{}
		for _, list := range []*yaml.Node{get(o.item, "parameters"), get(o.node, "parameters")} {
			if list == nil {
				continue
			}
			for _, p := range list.Content {
				p = deref(t, root, p)
				if str(p, "name") == "" || str(p, "in") == "" {
					t.Errorf("%s: parameter without name or in (line %d)", o, p.Line)
				}
				if get(p, "schema") == nil {
					t.Errorf("%s: parameter %s has no schema", o, str(p, "name"))
				}
				if str(p, "in") == "path" {
					if str(p, "required") != "true" {
						t.Errorf("%s: path parameter %s is not required", o, str(p, "name"))
					}
					declared[str(p, "name")] = true
				}
			}
		}
		used := map[string]bool{}
		for _, m := range re.FindAllStringSubmatch(o.path, -1) {
			used[m[1]] = true
			if !declared[m[1]] {
				t.Errorf("%s: path parameter {%s} is not declared", o, m[1])
			}
		}
		for name := range declared {
			if !used[name] {
				t.Errorf("%s: path parameter %s is not in the path", o, name)
			}
		}
	}
}

// TestErrorCodes checks the code table against the contract and that every error response
// uses a code whose status matches the status it is documented under.
func TestErrorCodes(t *testing.T) {
	root := load(t)
	want := map[string]int{
		"bad_request": 400, "invalid_json": 400, "validation_failed": 422,
		"unauthenticated": 401, "forbidden": 403, "permission_denied": 403, "not_found": 404, "conflict": 409,
		"payload_too_large": 413, "rate_limited": 429, "unavailable": 503,
		"internal": 500, "timeout": 504, "bad_gateway": 502, "approval_required": 403,
	}
	codes, err := lookup(root, "#/components/schemas/ErrorCode")
	if err != nil {
		t.Fatal(err)
	}
	enum := scalars(get(codes, "enum"))
	if len(enum) != len(want) {
		t.Errorf("ErrorCode has %d codes, want %d", len(enum), len(want))
	}
	status := map[string]int{}
	for _, c := range enum {
		s, err := strconv.Atoi(str(get(codes, "x-status"), c))
		if err != nil {
			t.Errorf("code %s: no x-status", c)
		}
		status[c] = s
		if want[c] != s {
			t.Errorf("code %s: status %d, want %d", c, s, want[c])
		}
		if str(get(codes, "x-descriptions"), c) == "" {
			t.Errorf("code %s: no x-descriptions entry", c)
		}
	}
	for _, o := range operations(root) {
		pairs(get(o.node, "responses"), func(st string, resp *yaml.Node) {
			code, _ := strconv.Atoi(st)
			if code < 400 {
				return
			}
			r := deref(t, root, resp)
			ex := get(get(get(get(r, "content"), "application/json"), "example"), "error")
			c := str(ex, "code")
			if c == "" {
				t.Errorf("%s %s: error response has no example code", o, st)
				return
			}
			if status[c] != code {
				t.Errorf("%s %s: example code %s has status %d", o, st, c, status[c])
			}
		})
	}
}

// TestSchemasRequiredExist checks that every name in a schema's required list is one of its
// properties.
func TestSchemasRequiredExist(t *testing.T) {
	root := load(t)
	var walk func(where string, s *yaml.Node)
	walk = func(where string, s *yaml.Node) {
		if s == nil || s.Kind != yaml.MappingNode {
			return
		}
		props := get(s, "properties")
		for _, r := range scalars(get(s, "required")) {
			if props != nil && get(props, r) == nil {
				t.Errorf("%s: required %q is not a property", where, r)
			}
		}
		pairs(props, func(name string, p *yaml.Node) { walk(where+"."+name, p) })
		walk(where+"[]", get(s, "items"))
		for _, a := range seq(get(s, "oneOf")) {
			// oneOf branches that only list required fields refer to the parent's properties.
			for _, r := range scalars(get(a, "required")) {
				if props != nil && get(props, r) == nil {
					t.Errorf("%s: oneOf requires %q, not a property", where, r)
				}
			}
		}
	}
	pairs(get(get(root, "components"), "schemas"), func(name string, s *yaml.Node) { walk(name, s) })
}

// TestComponentsUsed checks that every component is referenced somewhere in the document
// (extensions such as x-websocket included), so that nothing documented is orphaned.
func TestComponentsUsed(t *testing.T) {
	root := load(t)
	used := map[string]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if ref := str(n, "$ref"); ref != "" {
			used[ref] = true
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	pairs(get(root, "components"), func(kind string, group *yaml.Node) {
		if kind == "securitySchemes" {
			return
		}
		pairs(group, func(name string, _ *yaml.Node) {
			if ref := "#/components/" + kind + "/" + name; !used[ref] {
				t.Errorf("%s is never referenced", ref)
			}
		})
	})
}
