package api

// Spec conformance: spec/openapi.yaml is the source of truth of the API, and
// these tests hold the server (and the Go SDK's types) to it.
//
//   - TestSpecRoutes: the router's routes (routeTable) and the spec's
//     operations are the same set of (method, path).
//   - TestSpecResponses: real calls against the package's stack, each
//     response checked against the schema of its operation and status;
//     strict: a field the schema does not list fails, a required one
//     missing fails, an undocumented status or content type fails.
//   - TestSpecSDKTypes: the JSON names of the SDK's main types are the
//     properties of the matching schemas.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	warden "github.com/warden-sandbox/warden/sdk/go"
	"github.com/warden-sandbox/warden/spec"
)

var specMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// loadSpec parses spec/openapi.yaml into plain maps and slices.
func loadSpec(t *testing.T) map[string]any {
	t.Helper()
	var raw any
	if err := yaml.Unmarshal(spec.OpenAPI, &raw); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	doc, ok := plainYAML(raw).(map[string]any)
	if !ok {
		t.Fatal("openapi.yaml: top level is not a mapping")
	}
	return doc
}

// plainYAML turns YAML's maps with non-string keys (status codes) into
// map[string]any, recursively.
func plainYAML(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = plainYAML(e)
		}
		return x
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = plainYAML(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = plainYAML(e)
		}
		return x
	}
	return v
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// specOperations returns the spec's operations by "METHOD /path".
func specOperations(doc map[string]any) map[string]map[string]any {
	ops := map[string]map[string]any{}
	for path, item := range obj(doc["paths"]) {
		for m, op := range obj(item) {
			if slices.Contains(specMethods, m) {
				ops[strings.ToUpper(m)+" "+path] = obj(op)
			}
		}
	}
	return ops
}

// routeAliases maps router paths that serve a spec path under another
// pattern to that path.
var routeAliases = map[string]string{
	// The proxy with an empty {path}: ServeMux needs a pattern of its own.
	"/v1/sandboxes/{id}/ports/{port}/proxy": "/v1/sandboxes/{id}/ports/{port}/proxy/{path}",
}

var wildcardRest = regexp.MustCompile(`\{([^}]+)\.\.\.\}`)

// specPath returns a route pattern's method ("" for any) and the spec path
// it serves: "{name...}" is the spec's "{name}".
func specPath(pattern string) (method, path string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	path = wildcardRest.ReplaceAllString(path, "{$1}")
	if a, ok := routeAliases[path]; ok {
		path = a
	}
	return method, path
}

// TestSpecRoutes fails when a route is added, removed or moved without the
// spec, or the other way round.
func TestSpecRoutes(t *testing.T) {
	ops := specOperations(loadSpec(t))
	served := map[string]string{} // spec key -> route pattern
	var extra []string
	for _, rt := range env.srv.routeTable() {
		method, path := specPath(rt.pattern)
		if method == "" {
			// Any method (the port proxy): it serves every operation the
			// spec lists on its path, and the spec must list one.
			n := 0
			for key := range ops {
				if _, p, _ := strings.Cut(key, " "); p == path {
					served[key], n = rt.pattern, n+1
				}
			}
			if n == 0 {
				extra = append(extra, rt.pattern)
			}
			continue
		}
		key := method + " " + path
		if _, ok := ops[key]; !ok {
			extra = append(extra, rt.pattern)
			continue
		}
		if prev, dup := served[key]; dup {
			t.Errorf("operation %s is served by two routes: %q and %q", key, prev, rt.pattern)
		}
		served[key] = rt.pattern
	}
	slices.Sort(extra)
	for _, p := range extra {
		t.Errorf("route %q is not an operation of spec/openapi.yaml", p)
	}
	for _, key := range slices.Sorted(maps.Keys(ops)) {
		if _, ok := served[key]; !ok {
			t.Errorf("spec operation %s (%s) has no route in routeTable", key, ops[key]["operationId"])
		}
	}
}

// schemaChecker validates JSON values against the subset of JSON Schema the
// spec uses: $ref, type (one or a list, "null" included), const, enum,
// properties, required, additionalProperties, items, oneOf, anyOf, allOf,
// format date-time, minimum, maximum, minLength, maxLength, minItems,
// maxProperties and pattern. An object schema with properties and no
// additionalProperties admits no other field.
type schemaChecker struct{ doc map[string]any }

func (c schemaChecker) resolve(s map[string]any) map[string]any {
	for i := 0; i < 32; i++ {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		var n any = c.doc
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			n = obj(n)[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]
		}
		if obj(n) == nil {
			return map[string]any{"x-unresolved": ref}
		}
		s = obj(n)
	}
	return s
}

// check returns the violations of v against schema s, each prefixed with
// the JSON path where it is.
func (c schemaChecker) check(at string, s map[string]any, v any) []string {
	s = c.resolve(s)
	if ref, ok := s["x-unresolved"]; ok {
		return []string{fmt.Sprintf("%s: schema reference %v does not resolve", at, ref)}
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }

	if t, ok := s["type"]; ok {
		var types []string
		switch x := t.(type) {
		case string:
			types = []string{x}
		case []any:
			for _, e := range x {
				types = append(types, fmt.Sprint(e))
			}
		}
		if !slices.ContainsFunc(types, func(typ string) bool { return isType(typ, v) }) {
			bad("%s is not of type %v", brief(v), types)
			return errs
		}
	}
	if cv, ok := s["const"]; ok && !sameValue(cv, v) {
		bad("%s is not the constant %v", brief(v), cv)
	}
	if en, ok := s["enum"].([]any); ok && !slices.ContainsFunc(en, func(e any) bool { return sameValue(e, v) }) {
		bad("%s is not one of %v", brief(v), en)
	}
	switch x := v.(type) {
	case map[string]any:
		props := obj(s["properties"])
		for _, r := range asList(s["required"]) {
			if _, ok := x[r]; !ok {
				bad("required field %q is missing", r)
			}
		}
		if n, ok := s["maxProperties"].(int); ok && len(x) > n {
			bad("%d fields, at most %d", len(x), n)
		}
		ap, hasAP := s["additionalProperties"]
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if ps, ok := props[k]; ok {
				errs = append(errs, c.check(at+"."+k, obj(ps), x[k])...)
				continue
			}
			switch {
			case hasAP && ap == true:
			case hasAP && obj(ap) != nil:
				errs = append(errs, c.check(at+"."+k, obj(ap), x[k])...)
			case props != nil || (hasAP && ap == false):
				bad("field %q is not in the schema", k)
			}
		}
	case []any:
		if n, ok := s["minItems"].(int); ok && len(x) < n {
			bad("%d items, at least %d", len(x), n)
		}
		if is := obj(s["items"]); is != nil {
			for i, e := range x {
				errs = append(errs, c.check(fmt.Sprintf("%s[%d]", at, i), is, e)...)
			}
		}
	case string:
		if n, ok := s["maxLength"].(int); ok && utf8.RuneCountInString(x) > n {
			bad("longer than %d characters", n)
		}
		if n, ok := s["minLength"].(int); ok && utf8.RuneCountInString(x) < n {
			bad("shorter than %d characters", n)
		}
		if p, ok := s["pattern"].(string); ok {
			if re, err := regexp.Compile(p); err == nil && !re.MatchString(x) {
				bad("%q does not match %s", x, p)
			}
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				bad("%q is not a date-time", x)
			}
		}
	case json.Number:
		f, _ := new(big.Float).SetString(x.String())
		if f != nil {
			if m, ok := number(s["minimum"]); ok && f.Cmp(m) < 0 {
				bad("%s is under the minimum %v", x, s["minimum"])
			}
			if m, ok := number(s["maximum"]); ok && f.Cmp(m) > 0 {
				bad("%s is over the maximum %v", x, s["maximum"])
			}
		}
	}
	for _, sub := range asSchemas(s["allOf"]) {
		errs = append(errs, c.check(at, sub, v)...)
	}
	if anyOf := asSchemas(s["anyOf"]); len(anyOf) > 0 && !slices.ContainsFunc(anyOf, func(sub map[string]any) bool { return len(c.check(at, sub, v)) == 0 }) {
		bad("%s matches none of anyOf", brief(v))
	}
	if one := asSchemas(s["oneOf"]); len(one) > 0 {
		var match int
		var why []string
		for i, sub := range one {
			if e := c.check(at, sub, v); len(e) == 0 {
				match++
			} else {
				why = append(why, fmt.Sprintf("branch %d: %s", i, strings.Join(e, "; ")))
			}
		}
		if match != 1 {
			bad("%s matches %d branches of oneOf, want 1 (%s)", brief(v), match, strings.Join(why, " | "))
		}
	}
	return errs
}

func isType(typ string, v any) bool {
	switch typ {
	case "null":
		return v == nil
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, _ := new(big.Float).SetString(n.String())
		return f != nil && f.IsInt()
	}
	return false
}

func sameValue(spec, v any) bool {
	if n, ok := v.(json.Number); ok {
		m, ok := number(spec)
		f, _ := new(big.Float).SetString(n.String())
		return ok && f != nil && f.Cmp(m) == 0
	}
	return reflect.DeepEqual(spec, v)
}

func number(v any) (*big.Float, bool) {
	switch x := v.(type) {
	case int:
		return new(big.Float).SetInt64(int64(x)), true
	case float64:
		return new(big.Float).SetFloat64(x), true
	}
	return nil, false
}

func asList(v any) []string {
	var out []string
	for _, e := range asAny(v) {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

func asAny(v any) []any { l, _ := v.([]any); return l }

func asSchemas(v any) []map[string]any {
	var out []map[string]any
	for _, e := range asAny(v) {
		out = append(out, obj(e))
	}
	return out
}

func brief(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// TestSpecSchemaChecker checks the checker itself, so that a lenient bug in
// it cannot make TestSpecResponses pass.
func TestSpecSchemaChecker(t *testing.T) {
	c := schemaChecker{doc: loadSpec(t)}
	sandbox := func(mod func(m map[string]any)) any {
		m := map[string]any{
			"id": "sb-x", "template": "base", "state": "running", "owner": "pr-x", "backend": "native",
			"cpu_millis": 1000, "memory_mb": 512, "disk_mb": 1024, "metadata": map[string]any{"k": "v"},
			"env_keys": []any{}, "user": "user", "workdir": "/home/user", "created_at": "2025-01-02T15:04:05Z",
			"started_at": "2025-01-02T15:04:05Z", "expires_at": nil, "resume_timeout_seconds": 10, "ended_at": nil,
			"end_reason": nil, "auto_pause": false, "auto_resume": false, "network": map[string]any{"mode": "none"},
		}
		if _, ok := obj(obj(c.resolve(map[string]any{"$ref": "#/components/schemas/Sandbox"}))["properties"])["name"]; ok {
			m["name"] = "" // sandbox names (issue 16)
		}
		mod(m)
		b, _ := json.Marshal(m)
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		d.Decode(&v)
		return v
	}
	ref := map[string]any{"$ref": "#/components/schemas/Sandbox"}
	if errs := c.check("$", ref, sandbox(func(map[string]any) {})); len(errs) > 0 {
		t.Fatalf("a valid sandbox is refused: %v", errs)
	}
	for name, mod := range map[string]func(m map[string]any){
		"extra field":        func(m map[string]any) { m["surprise"] = 1 },
		"missing required":   func(m map[string]any) { delete(m, "owner") },
		"wrong type":         func(m map[string]any) { m["cpu_millis"] = "1000" },
		"fraction":           func(m map[string]any) { m["cpu_millis"] = 1.5 },
		"not in enum":        func(m map[string]any) { m["state"] = "asleep" },
		"null not allowed":   func(m map[string]any) { m["owner"] = nil },
		"bad date-time":      func(m map[string]any) { m["created_at"] = "yesterday" },
		"nested extra field": func(m map[string]any) { m["network"] = map[string]any{"mode": "none", "x": 1} },
		"nested bad enum":    func(m map[string]any) { m["network"] = map[string]any{"mode": "some"} },
		"map value type":     func(m map[string]any) { m["metadata"] = map[string]any{"k": 1} },
		"array item type":    func(m map[string]any) { m["env_keys"] = []any{1} },
	} {
		if errs := c.check("$", ref, sandbox(mod)); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
	// oneOf: a process event is exactly one of its kinds.
	ev := map[string]any{"$ref": "#/components/schemas/ProcessEvent"}
	if errs := c.check("$", ev, map[string]any{"type": "start", "pid": json.Number("3")}); len(errs) > 0 {
		t.Errorf("a start event is refused: %v", errs)
	}
	if errs := c.check("$", ev, map[string]any{"type": "begin", "pid": json.Number("3")}); len(errs) == 0 {
		t.Error("an event of no kind is accepted")
	}
}

// exchange is one request and the response the server wrote.
type exchange struct {
	method, path, pattern string
	status                int
	header                http.Header
	body                  []byte
}

// recorder keeps a copy of what a handler writes.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// conformance serves the API's handler and checks every response it writes
// against the spec.
type conformance struct {
	t      *testing.T
	doc    map[string]any
	ops    map[string]map[string]any
	chk    schemaChecker
	routes *http.ServeMux // route patterns, to name the route of a request
	hs     *httptest.Server

	mu      sync.Mutex
	seen    map[string]bool // spec operation -> a response was checked
	errs    []string
	checked int
}

func newConformance(t *testing.T) *conformance {
	doc := loadSpec(t)
	c := &conformance{t: t, doc: doc, ops: specOperations(doc), chk: schemaChecker{doc: doc},
		routes: http.NewServeMux(), seen: map[string]bool{}}
	for _, rt := range env.srv.routeTable() {
		c.routes.Handle(rt.pattern, http.NotFoundHandler())
	}
	h := env.srv.Handler()
	c.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := c.routes.Handler(r)
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		c.verify(exchange{method: r.Method, path: r.URL.Path, pattern: pattern, status: rec.status, header: w.Header(), body: rec.body.Bytes()})
	}))
	t.Cleanup(c.hs.Close)
	return c
}

// verify checks one exchange against the spec.
func (c *conformance) verify(x exchange) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	where := fmt.Sprintf("%s %s -> %d", x.method, x.path, x.status)
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.checked++
		for _, e := range errs {
			c.errs = append(c.errs, where+": "+e)
		}
	}()

	if x.header.Get("X-Request-Id") == "" {
		bad("no X-Request-Id header")
	}
	var resp map[string]any
	var key string
	if x.pattern == "" {
		// No route: a 404 with the Error body.
		if x.status != http.StatusNotFound {
			bad("no route, yet status %d", x.status)
		}
		resp = c.chk.resolve(map[string]any{"$ref": "#/components/responses/NotFound"})
	} else {
		method, path := specPath(x.pattern)
		if method == "" {
			method = "GET" // the proxy's one documented operation
		}
		key = method + " " + path
		op, ok := c.ops[key]
		if !ok {
			bad("route %q is not a spec operation", x.pattern)
			return
		}
		r, ok := obj(op["responses"])[fmt.Sprint(x.status)]
		if !ok {
			r, ok = obj(op["responses"])["default"]
		}
		if !ok {
			bad("status %d is not documented for %s", x.status, key)
			return
		}
		resp = c.chk.resolve(obj(r))
	}
	content := obj(resp["content"])
	ctype := x.header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ctype)
	if len(content) == 0 {
		if len(x.body) > 0 {
			bad("a %s body where the spec documents none", ctype)
		}
		if key != "" {
			c.mark(key)
		}
		return
	}
	media := obj(content[mt])
	if media == nil {
		bad("content type %q is not documented (documented: %v)", ctype, slices.Sorted(maps.Keys(content)))
		return
	}
	schema := obj(media["schema"])
	var values [][]byte
	switch mt {
	case "application/json":
		values = [][]byte{x.body}
	case "application/x-ndjson":
		for _, line := range bytes.Split(x.body, []byte("\n")) {
			if len(bytes.TrimSpace(line)) > 0 {
				values = append(values, line)
			}
		}
	default:
		// Bytes (files, archives, this document, metrics): no JSON schema.
		if key != "" {
			c.mark(key)
		}
		return
	}
	for i, b := range values {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			bad("value %d is not JSON: %v", i, err)
			continue
		}
		if d.More() {
			bad("value %d: trailing data", i)
		}
		errs = append(errs, c.chk.check("$", schema, v)...)
	}
	if key != "" {
		c.mark(key)
	}
}

func (c *conformance) mark(key string) {
	c.mu.Lock()
	c.seen[key] = true
	c.mu.Unlock()
}

// do sends a request through the checking server. body is nil, a string
// (sent as is) or a value sent as JSON.
func (c *conformance) do(method, path, key string, body any) (int, []byte) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctxT(c.t, 60*time.Second), method, c.hs.URL+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// want sends a request and fails the test unless the status is want.
func (c *conformance) want(status int, method, path, key string, body any) []byte {
	c.t.Helper()
	got, b := c.do(method, path, key, body)
	if got != status {
		c.t.Errorf("%s %s: status %d, want %d: %s", method, path, got, status, truncate(string(b), 300))
	}
	return b
}

// TestSpecResponses drives the main operations through the real stack and
// checks every response against the spec (see conformance.verify).
func TestSpecResponses(t *testing.T) {
	needsRealSandbox(t) // it writes /tmp in the sandbox
	c := newConformance(t)
	admin, agent := env.adminKey, env.aKey

	// System.
	c.want(200, "GET", "/healthz", "", nil)
	c.want(200, "GET", "/v1/openapi.yaml", "", nil)
	c.want(200, "GET", "/metrics", admin, nil)
	c.want(200, "GET", "/v1/whoami", agent, nil)

	// Sandboxes.
	var sb struct {
		ID string `json:"id"`
	}
	b := c.want(201, "POST", "/v1/sandboxes", agent, map[string]any{
		"metadata": map[string]string{"suite": "conformance"}, "env": map[string]string{"K": "V"}, "timeout_seconds": 300,
	})
	if err := json.Unmarshal(b, &sb); err != nil || sb.ID == "" {
		t.Fatalf("create: %v: %s", err, b)
	}
	t.Cleanup(func() { env.mgr.Kill(ctxT(t, 30*time.Second), sb.ID, "test cleanup") })
	p := "/v1/sandboxes/" + sb.ID
	c.want(200, "GET", p, agent, nil)
	c.want(200, "GET", "/v1/sandboxes?state=running&limit=5", agent, nil)
	c.want(200, "POST", p+"/timeout", agent, map[string]any{"timeout_seconds": 600})
	c.want(200, "GET", p+"/usage", agent, nil)
	c.want(200, "GET", p+"/network", agent, nil)

	// Processes.
	c.want(200, "POST", p+"/exec", agent, map[string]any{"cmd": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	c.want(200, "GET", p+"/processes", agent, nil)

	// Files.
	c.want(200, "PUT", p+"/files?path=/tmp/conf.txt", agent, "hello")
	c.want(200, "GET", p+"/files?path=/tmp/conf.txt", agent, nil)
	c.want(200, "GET", p+"/fs/stat?path=/tmp/conf.txt", agent, nil)
	c.want(200, "GET", p+"/fs/list?path=/tmp", agent, nil)
	c.want(201, "POST", p+"/fs/mkdir", agent, map[string]any{"path": "/tmp/confdir"})
	c.want(200, "POST", p+"/fs/move", agent, map[string]any{"source": "/tmp/conf.txt", "destination": "/tmp/confdir/conf.txt"})
	var ps struct {
		URL string `json:"url"`
	}
	b = c.want(200, "POST", p+"/files/presign", agent, map[string]any{"path": "/tmp/confdir/conf.txt", "op": "read"})
	if err := json.Unmarshal(b, &ps); err == nil {
		if u, err := url.Parse(ps.URL); err == nil {
			c.want(200, "GET", u.RequestURI(), "", nil)
		}
	}
	c.want(200, "GET", p+"/archive?path=/tmp/confdir", agent, nil)
	c.want(204, "DELETE", p+"/files?path=/tmp/confdir/conf.txt", agent, nil)

	// Network and ports.
	c.want(200, "PUT", p+"/network", agent, map[string]any{"mode": "none"})
	c.do("POST", p+"/ports/8080", agent, map[string]any{"public": false})
	c.do("POST", p+"/ports/8080/url", agent, map[string]any{})
	c.do("DELETE", p+"/ports/8080", agent, nil)
	// Whatever these answer on this stack (native cannot fork; there may be
	// no secret store), the answer is checked.
	c.do("POST", p+"/fork", agent, map[string]any{"count": 1})
	c.do("GET", "/v1/secrets", admin, nil)

	// Lifecycle.
	c.want(200, "POST", p+"/pause", agent, nil)
	c.want(200, "GET", p, agent, nil) // paused: expires_at null, resume_timeout_seconds set
	c.want(200, "POST", p+"/resume", agent, nil)

	// Templates, identity, audit.
	// The test stack may have no template store (503): either way the
	// response is checked.
	c.do("GET", "/v1/templates", admin, nil)
	c.do("GET", "/v1/templates/base", admin, nil)
	c.do("GET", "/v1/template-store/usage", admin, nil)
	c.want(200, "GET", "/v1/principals", admin, nil)
	var pr struct {
		ID string `json:"id"`
	}
	b = c.want(201, "POST", "/v1/principals", admin, map[string]any{"kind": "agent", "name": "conf-" + uniq()})
	json.Unmarshal(b, &pr)
	var key struct {
		APIKey struct {
			ID string `json:"id"`
		} `json:"api_key"`
	}
	b = c.want(201, "POST", "/v1/keys", admin, map[string]any{"principal_id": pr.ID, "name": "conf", "scopes": []string{"sandboxes:read"}})
	if err := json.Unmarshal(b, &key); err != nil || key.APIKey.ID == "" {
		t.Fatalf("create key: %v: %s", err, b)
	}
	c.want(200, "GET", "/v1/keys", admin, nil)
	c.want(204, "DELETE", "/v1/keys/"+key.APIKey.ID, admin, nil)
	c.want(200, "GET", "/v1/audit?limit=5", admin, nil)
	c.want(200, "GET", "/v1/audit/verify", admin, nil)
	c.want(200, "GET", "/v1/audit/anchor", admin, nil)

	// Errors: every one has the Error body and a documented status.
	c.want(404, "GET", "/v1/sandboxes/sb-doesnotexist", agent, nil)
	c.want(404, "GET", "/v1/sandboxes/"+env.sbA, env.bKey, nil) // another principal's
	c.want(401, "GET", "/v1/sandboxes", "", nil)
	c.want(403, "GET", "/v1/principals", agent, nil)
	c.want(400, "POST", "/v1/sandboxes", agent, "{not json")
	c.want(400, "POST", "/v1/sandboxes", agent, map[string]any{"no_such_field": 1})
	c.want(422, "POST", "/v1/sandboxes", agent, map[string]any{"timeout_seconds": 100000})
	c.want(422, "POST", p+"/timeout", agent, map[string]any{"timeout_seconds": 0})
	c.want(404, "GET", "/v1/no/such/route", agent, nil)

	c.want(204, "DELETE", p, agent, nil)
	c.want(409, "POST", p+"/pause", agent, nil)

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
	if c.checked == 0 {
		t.Fatal("no response was checked")
	}
	var missed []string
	for _, k := range slices.Sorted(maps.Keys(c.ops)) {
		if !c.seen[k] {
			missed = append(missed, k)
		}
	}
	t.Logf("checked %d responses covering %d of %d operations; not driven here: %s",
		c.checked, len(c.seen), len(c.ops), strings.Join(missed, ", "))
}

// TestSpecSDKTypes checks that the Go SDK's types use the spec's field
// names: every JSON name of the type is a property of the schema, and
// every property of the schema has a field (unless listed as left out,
// with why).
func TestSpecSDKTypes(t *testing.T) {
	doc := loadSpec(t)
	schemas := obj(obj(doc["components"])["schemas"])
	for _, c := range []struct {
		schema string
		typ    any
		skip   []string // properties the SDK type leaves out on purpose
	}{
		{"Sandbox", warden.Sandbox{}, nil},
		{"CreateSandboxRequest", warden.CreateSandboxRequest{}, nil},
		{"ForkSandboxRequest", warden.ForkRequest{}, nil},
		{"SandboxList", warden.SandboxPage{}, nil},
		{"Usage", warden.Usage{}, nil},
		{"NetworkPolicy", warden.NetworkPolicy{}, nil},
		{"NetworkStatus", warden.NetworkStatus{}, nil},
		{"ExecRequest", warden.ExecRequest{}, nil},
		{"ProcessInfo", warden.ProcessInfo{}, nil},
		{"Entry", warden.Entry{}, nil},
		{"PresignRequest", warden.PresignRequest{}, nil},
		{"Template", warden.Template{}, nil},
		{"TemplateManifest", warden.TemplateManifest{}, nil},
		{"TemplateUsage", warden.TemplateUsage{}, nil},
		{"GCReport", warden.GCReport{}, nil},
		{"Principal", warden.Principal{}, nil},
		{"CreatePrincipalRequest", warden.CreatePrincipalRequest{}, nil},
		{"APIKey", warden.APIKey{}, nil},
		{"CreateKeyRequest", warden.CreateKeyRequest{}, nil},
		{"CreateKeyResponse", warden.CreatedKey{}, nil},
		{"AuditEvent", warden.AuditEvent{}, nil},
		{"VerifyReport", warden.VerifyReport{}, nil},
		{"AuditAnchor", warden.AuditAnchor{}, nil},
		{"Secret", warden.Secret{}, nil},
		{"Grant", warden.Grant{}, nil},
		{"GitCloneRequest", warden.GitCloneRequest{}, nil},
		{"GitRemoteRequest", warden.GitRemoteRequest{}, nil},
		{"GitCommitRequest", warden.GitCommitRequest{}, nil},
		{"GitResult", warden.GitResult{}, nil},
		{"Health", warden.Health{}, nil},
		{"Policy", warden.Policy{}, nil},
		{"PolicyWrite", warden.PolicyWrite{}, nil},
		{"PolicyScope", warden.PolicyScope{}, nil},
		{"PolicyRule", warden.Rule{}, nil},
		{"PolicyTestRequest", warden.PolicyTestRequest{}, nil},
		{"PolicyTestResult", warden.PolicyTestResult{}, nil},
		{"PolicyTestEvent", warden.PolicyTestEvent{}, nil},
		{"Approval", warden.Approval{}, nil},
		{"MCPConnector", warden.MCPConnector{}, nil},
		{"MCPConnectorWrite", warden.MCPConnectorWrite{}, nil},
		{"MCPServer", warden.MCPServer{}, nil},
		{"MCPServerWrite", warden.MCPServerWrite{}, nil},
		{"MCPGrant", warden.MCPGrant{}, nil},
		{"MCPTool", warden.MCPTool{}, nil},
		{"MCPCredential", warden.MCPCredential{}, nil},
		{"MCPCredentialWrite", warden.MCPCredentialWrite{}, nil},
		{"Agent", warden.Agent{}, nil},
		{"AgentVersion", warden.AgentVersion{}, nil},
		{"AgentRun", warden.AgentRun{}, nil},
		{"AgentLogLine", warden.AgentLogLine{}, nil},
		{"Webhook", warden.Webhook{}, nil},
		{"WebhookDelivery", warden.WebhookDelivery{}, nil},
		{"WebhookWrite", warden.WebhookWrite{}, nil},
		{"WebhookTestResult", warden.WebhookTestResult{}, nil},
		{"VolumeSnapshot", warden.VolumeSnapshot{}, nil},
	} {
		s := obj(schemas[c.schema])
		if s == nil {
			t.Errorf("schema %s is not in the spec", c.schema)
			continue
		}
		props := map[string]bool{}
		for k := range obj(s["properties"]) {
			props[k] = true
		}
		fields := jsonNames(reflect.TypeOf(c.typ))
		name := reflect.TypeOf(c.typ).String()
		for _, f := range slices.Sorted(maps.Keys(fields)) {
			if !props[f] {
				t.Errorf("%s: field %q is not a property of schema %s", name, f, c.schema)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(props)) {
			if !fields[p] && !slices.Contains(c.skip, p) {
				t.Errorf("%s: schema %s property %q has no field", name, c.schema, p)
			}
		}
	}
}

// jsonNames returns the JSON names of a struct's fields, embedded structs'
// included, "-" excluded.
func jsonNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				maps.Copy(out, jsonNames(ft))
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
	return out
}
