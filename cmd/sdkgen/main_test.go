package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/spec"
)

// TestSDKTypesUpToDate fails when a committed SDK type file is not what sdkgen writes from
// spec/openapi.yaml: the spec changed without the SDKs.
func TestSDKTypesUpToDate(t *testing.T) {
	files, err := Generate(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{PythonOut, TSOut} {
		got, err := os.ReadFile(filepath.Join("..", "..", rel))
		if err != nil {
			t.Fatalf("read %s: %v (run go run ./cmd/sdkgen to create it)", rel, err)
		}
		want := files[rel]
		if bytes.Equal(got, want) {
			continue
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
				t.Errorf("%s is out of date: run go run ./cmd/sdkgen to update\nfirst difference at line %d:\n have: %q\n want: %q", rel, i+1, g, w)
				break
			}
		}
	}
}

// TestGenerateDetectsDrift checks that a change to a schema changes the generated files, so
// the drift check above can fail.
func TestGenerateDetectsDrift(t *testing.T) {
	before, err := Generate(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Replace(spec.OpenAPI, []byte("\n    Sandbox:\n      type: object\n      required: [id, "),
		[]byte("\n    Sandbox:\n      type: object\n      required: [id, drift_probe, "), 1)
	changed = bytes.Replace(changed, []byte("\n    Sandbox:\n      type: object\n      required: [id, drift_probe, name, template, state, owner, backend, cpu_millis, memory_mb, disk_mb, metadata, env_keys, user, workdir, created_at, started_at, expires_at, resume_timeout_seconds, ended_at, end_reason]\n      properties:\n"),
		[]byte("\n    Sandbox:\n      type: object\n      required: [id, drift_probe, name, template, state, owner, backend, cpu_millis, memory_mb, disk_mb, metadata, env_keys, user, workdir, created_at, started_at, expires_at, resume_timeout_seconds, ended_at, end_reason]\n      properties:\n        drift_probe: {type: integer}\n"), 1)
	if bytes.Equal(changed, spec.OpenAPI) {
		t.Fatal("could not edit the Sandbox schema: update this test's probe")
	}
	after, err := Generate(changed)
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{PythonOut: "    drift_probe: int\n", TSOut: "  drift_probe: number;\n"} {
		if bytes.Equal(before[rel], after[rel]) {
			t.Errorf("%s did not change with the spec", rel)
		}
		if !bytes.Contains(after[rel], []byte(want)) {
			t.Errorf("%s lacks %q", rel, want)
		}
	}
}

// TestGenerateShapes spot-checks the rendering of required, optional, nullable, enum and
// union types in both languages.
func TestGenerateShapes(t *testing.T) {
	files, err := Generate(spec.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	pyWant := []string{
		"class Sandbox(TypedDict):\n",
		"    state: SandboxState\n",
		"SandboxState = Literal[\"starting\", \"running\", \"paused\", \"stopping\", \"stopped\", \"failed\", \"lost\"]\n",
		"    \"not_found\": 404,\n",
		"    \"createSandbox\": (\"POST\", \"/v1/sandboxes\"),\n",
	}
	for _, w := range pyWant {
		if !bytes.Contains(files[PythonOut], []byte(w)) {
			t.Errorf("python types lack %q", w)
		}
	}
	tsWant := []string{
		"export interface Sandbox {\n",
		"  state: SandboxState;\n",
		"export type SandboxState = \"starting\" | \"running\" | \"paused\" | \"stopping\" | \"stopped\" | \"failed\" | \"lost\";\n",
		"  not_found: 404,\n",
		"  createSandbox: [\"POST\", \"/v1/sandboxes\"],\n",
	}
	for _, w := range tsWant {
		if !bytes.Contains(files[TSOut], []byte(w)) {
			t.Errorf("ts types lack %q", w)
		}
	}
}
