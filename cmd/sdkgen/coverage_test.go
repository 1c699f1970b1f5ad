package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/warden-sandbox/warden/spec"
	"go.yaml.in/yaml/v3"
)

// opCall matches the operation registrations of the SDKs' hand-written layer:
// @_op("id", ...) in Python and op("id", ...) in TypeScript.
var (
	opCall   = regexp.MustCompile(`(?s)\b_?op\(([^()]*)\)`)
	quotedID = regexp.MustCompile(`"([A-Za-z0-9]+)"`)
)

// registeredOps returns the operation ids registered in the files matching glob.
func registeredOps(t *testing.T, glob string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", glob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s (%v)", glob, err)
	}
	ops := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range opCall.FindAllSubmatch(b, -1) {
			for _, q := range quotedID.FindAllSubmatch(m[1], -1) {
				ops[string(q[1])] = true
			}
		}
	}
	return ops
}

// TestSDKsCoverEveryOperation fails when an operation of spec/openapi.yaml has no method in
// the Python or the TypeScript SDK (each SDK's own suite checks the same at run time).
func TestSDKsCoverEveryOperation(t *testing.T) {
	inlineNames = map[*yaml.Node]string{}
	m, err := load(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, sdk := range []struct{ name, glob string }{
		{"sdk/python", "sdk/python/warden/*.py"},
		{"sdk/ts", "sdk/ts/src/*.ts"},
	} {
		have := registeredOps(t, sdk.glob)
		var missing []string
		spec := map[string]bool{}
		for _, o := range m.operations {
			spec[o.id] = true
			if !have[o.id] {
				missing = append(missing, o.id)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s has no method for these operations of spec/openapi.yaml (add them to its hand-written layer): %v", sdk.name, missing)
		}
		var unknown []string
		for id := range have {
			if !spec[id] {
				unknown = append(unknown, id)
			}
		}
		slices.Sort(unknown)
		if len(unknown) > 0 {
			t.Errorf("%s registers operations the spec does not have: %v", sdk.name, unknown)
		}
	}
}
