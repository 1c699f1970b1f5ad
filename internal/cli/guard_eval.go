package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// maxGuardEvalData is the most guard eval sends (the API's limit).
const maxGuardEvalData = 32 << 20

func guardEvalCmd() *command {
	var data, split, detectors string
	c := &command{name: "eval", short: "Measure the detectors on labelled JSONL: precision, recall, F1",
		long: "Run the detectors over labelled JSONL (--data FILE, gzip allowed; one {\"text\", \"label\",\n" +
			"\"split\"} object a line, as in the guard corpus) and print precision, recall and F1 per\n" +
			"label and detector, the confusion matrix and the p50/p99 time per KiB. Labels: secret,\n" +
			"pii, injection, jailbreak; any other is a negative. The key needs policies:read.",
		examples: []string{
			"warden guard eval --data ../shared/data/guard/secrets.jsonl --split dev",
			"warden guard eval --data injection.jsonl.gz --detectors injection",
		},
		json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&data, "data", "FILE", `labelled JSONL, .gz allowed ("-": stdin; required)`)
		fs.String(&split, "split", "NAME", "only rows of this split (train, dev)")
		fs.String(&detectors, "detectors", "LIST", "only these detectors, comma-separated (default: all)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 || data == "" {
			return usageErr(c, "want --data FILE and no arguments")
		}
		var in io.Reader = r.env.Stdin
		if data != "-" {
			f, err := os.Open(data)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		b, err := io.ReadAll(io.LimitReader(in, maxGuardEvalData+1))
		if err != nil {
			return fmt.Errorf("read %s: %w", data, err)
		}
		if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return fmt.Errorf("%s: %w", data, err)
			}
			if b, err = io.ReadAll(io.LimitReader(zr, maxGuardEvalData+1)); err != nil {
				return fmt.Errorf("%s: %w", data, err)
			}
		}
		if len(b) > maxGuardEvalData {
			return fmt.Errorf("%s: larger than %d MiB", data, maxGuardEvalData>>20)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		rep, err := cl.EvalGuard(ctx, b, split, splitList(detectors))
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, rep)
		}
		out := r.env.Stdout
		fmt.Fprintf(out, "%d rows", rep.Rows)
		if rep.Split != "" {
			fmt.Fprintf(out, " (split %s)", rep.Split)
		}
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DETECTOR\tLABEL\tTP\tFP\tFN\tTN\tPRECISION\tRECALL\tF1")
		for _, g := range rep.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\n", g.Detector, g.Label, g.TP, g.FP, g.FN, g.TN,
				g.Precision, g.Recall, g.F1)
		}
		tw.Flush()
		var labels, preds []string
		for l, m := range rep.Confusion {
			labels = append(labels, l)
			for p := range m {
				if !slices.Contains(preds, p) {
					preds = append(preds, p)
				}
			}
		}
		slices.Sort(labels)
		slices.Sort(preds)
		fmt.Fprintln(out, "\nconfusion (rows: true label; columns: predicted)")
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LABEL\t"+strings.ToUpper(strings.Join(preds, "\t")))
		for _, l := range labels {
			fmt.Fprint(tw, l)
			for _, p := range preds {
				fmt.Fprintf(tw, "\t%d", rep.Confusion[l][p])
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		fmt.Fprintf(out, "\ntime per KiB: p50 %.0f µs, p99 %.0f µs\n", rep.P50PerKiBUS, rep.P99PerKiBUS)
		return nil
	}
	return c
}
