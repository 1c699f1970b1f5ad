package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/spec"
	"go.yaml.in/yaml/v3"
)

// TestDocUpToDate fails when docs/api.md is not what apidoc renders from the spec.
func TestDocUpToDate(t *testing.T) {
	want, err := Render(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatalf("read docs/api.md: %v (run go run ./cmd/apidoc to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/api.md is out of date: run go run ./cmd/apidoc to update\nfirst difference at line %d:\n have: %q\n want: %q", i+1, g, w)
		}
	}
	t.Fatal("docs/api.md is out of date: run go run ./cmd/apidoc to update")
}

// TestRenderCoversEveryOperation checks that every operation and schema gets a section.
func TestRenderCoversEveryOperation(t *testing.T) {
	doc, err := Render(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRenderer(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := r.operations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) == 0 {
		t.Fatal("no operations")
	}
	for _, o := range ops {
		if !bytes.Contains(doc, []byte(`<a id="`+opAnchor(o)+`"></a>`)) {
			t.Errorf("no section for %s", o.id())
		}
		if !bytes.Contains(doc, []byte("(#"+opAnchor(o)+")")) {
			t.Errorf("%s missing from the contents", o.id())
		}
	}
	pairs(get(get(r.root, "components"), "schemas"), func(name string, _ *yaml.Node) {
		if !bytes.Contains(doc, []byte(`<a id="`+schemaAnchor(name)+`"></a>`)) {
			t.Errorf("no section for schema %s", name)
		}
	})
	if bytes.Contains(doc, []byte("\\u00")) {
		t.Error("output contains JSON unicode escapes")
	}
}

func TestRenderRejectsBadSpecs(t *testing.T) {
	for name, src := range map[string]string{
		"not yaml":       "paths: [",
		"no paths":       "openapi: 3.1.0\n",
		"no operationId": "openapi: 3.1.0\npaths:\n  /x:\n    get:\n      responses: {}\n",
		"dangling ref":   "openapi: 3.1.0\npaths:\n  /x:\n    get:\n      operationId: x\n      responses:\n        \"200\": {$ref: \"#/components/responses/Nope\"}\n",
	} {
		if _, err := Render([]byte(src)); err == nil {
			t.Errorf("%s: Render succeeded", name)
		}
	}
}
