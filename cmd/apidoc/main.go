// Command apidoc renders the Markdown API reference, docs/api.md, from the OpenAPI document
// in spec/openapi.yaml.
//
// Run it from the repository root after changing the spec:
//
//	go run ./cmd/apidoc
//
// A test in this package fails when docs/api.md differs from what apidoc would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/warden-sandbox/warden/spec"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("apidoc", flag.ContinueOnError)
	specPath := fs.String("spec", "", "OpenAPI document to read (default: the embedded spec/openapi.yaml)")
	out := fs.String("o", "docs/api.md", "Markdown file to write, or - for stdout")
	check := fs.Bool("check", false, "do not write; exit non-zero if the output file is out of date")
	if err := fs.Parse(args); err != nil {
		return err
	}
	src := spec.OpenAPI
	if *specPath != "" {
		b, err := os.ReadFile(*specPath)
		if err != nil {
			return fmt.Errorf("read spec: %w", err)
		}
		src = b
	}
	doc, err := Render(src)
	if err != nil {
		return err
	}
	switch {
	case *out == "-":
		_, err = os.Stdout.Write(doc)
		return err
	case *check:
		cur, err := os.ReadFile(*out)
		if err != nil {
			return fmt.Errorf("read %s: %w", *out, err)
		}
		if !bytes.Equal(cur, doc) {
			return fmt.Errorf("%s is out of date: run go run ./cmd/apidoc", *out)
		}
		return nil
	default:
		if err := os.WriteFile(*out, doc, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
		return nil
	}
}
