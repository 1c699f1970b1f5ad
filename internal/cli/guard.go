package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// maxGuardInput is the most a guard test reads (the API's limit).
const maxGuardInput = 1 << 20

func guardCmd() *command {
	return &command{
		name:  "guard",
		short: "Try the guardrails' detectors on a text or a JSON document",
		long: "Show what the guard's detectors (secrets, pii, injection) find, as a policy's guard\n" +
			"section would: the detector, the kind, where and the confidence, never the matched value.\n" +
			"The key needs policies:read.",
		subs: []*command{guardTestCmd(), guardEvalCmd()},
	}
}

func guardTestCmd() *command {
	var jsonFile, detectors string
	c := &command{name: "test", args: "[TEXT|-]", short: "Show what the detectors find in a text or a JSON document",
		long: "Show what the detectors find in TEXT (\"-\": read it from stdin) or, with --json-file\n" +
			"FILE, in the string values of a JSON document (\"-\": stdin). Findings name the detector,\n" +
			"the kind, the JSON path (WHERE), the byte span and the confidence; never the value.",
		examples: []string{
			"warden guard test 'my key is AKIAZ3MSJV4WQXRTY7KD'",
			"warden guard test --json-file call.json --detectors secrets,pii",
		},
		json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&jsonFile, "json-file", "FILE", `inspect the JSON document in FILE ("-": stdin)`)
		fs.String(&detectors, "detectors", "LIST", "only these detectors, comma-separated (default: all)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		var q warden.GuardTestRequest
		switch {
		case jsonFile != "" && len(args) != 0:
			return usageErr(c, "give TEXT or --json-file FILE, not both")
		case jsonFile != "":
			b, err := readGuardInput(r, jsonFile)
			if err != nil {
				return err
			}
			if !json.Valid(b) {
				return fmt.Errorf("%s: not a JSON document", jsonFile)
			}
			q.JSON = b
		case len(args) == 1:
			text := args[0]
			if text == "-" {
				b, err := readGuardInput(r, "-")
				if err != nil {
					return err
				}
				text = string(b)
			}
			q.Text = &text
		default:
			return usageErr(c, "want one TEXT (or --json-file FILE)")
		}
		for _, d := range strings.Split(detectors, ",") {
			if d = strings.TrimSpace(d); d != "" {
				q.Detectors = append(q.Detectors, d)
			}
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		res, err := cl.TestGuard(ctx, q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, res)
		}
		if len(res.Findings) == 0 {
			fmt.Fprintln(r.env.Stdout, "no findings")
			return nil
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DETECTOR\tKIND\tWHERE\tSPAN\tCONFIDENCE")
		for _, f := range res.Findings {
			where := f.Where
			if where == "" {
				where = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d-%d\t%.2f\n", f.Detector, f.Kind, where, f.Start, f.End, f.Confidence)
		}
		return tw.Flush()
	}
	return c
}

// readGuardInput reads a file ("-": stdin) of at most maxGuardInput bytes.
func readGuardInput(r *runner, name string) ([]byte, error) {
	var in io.Reader = r.env.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, maxGuardInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxGuardInput {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxGuardInput)
	}
	return b, nil
}
