// Command sdkgen writes the generated types of the Python and TypeScript SDKs from the
// OpenAPI document in spec/openapi.yaml:
//
//	sdk/python/warden/_types.py  TypedDicts, Literal aliases and the error-code table
//	sdk/ts/src/types.ts          interfaces, union aliases and the error-code table
//
// Run it from the repository root after changing the spec:
//
//	go run ./cmd/sdkgen
//
// A test in this package fails when the committed files differ from what sdkgen writes, so
// the SDKs cannot drift from the spec unnoticed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warden-sandbox/warden/spec"
)

// Outputs, relative to the repository root.
const (
	PythonOut = "sdk/python/warden/_types.py"
	TSOut     = "sdk/ts/src/types.ts"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sdkgen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sdkgen", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root to write the SDK files under")
	check := fs.Bool("check", false, "do not write; exit non-zero if a generated file is out of date")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files, err := Generate(spec.OpenAPI)
	if err != nil {
		return err
	}
	for _, rel := range []string{PythonOut, TSOut} {
		path := filepath.Join(*root, rel)
		if *check {
			cur, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("read %s: %w", rel, err)
			}
			if !bytes.Equal(cur, files[rel]) {
				return fmt.Errorf("%s is out of date: run go run ./cmd/sdkgen", rel)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(rel), err)
		}
		if err := writeAtomic(path, files[rel]); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic writes b to path through a temporary file in the same directory.
func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sdkgen-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
