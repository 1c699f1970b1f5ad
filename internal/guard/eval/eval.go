// Package eval measures guard detectors on labelled JSONL data: one object a
// line, {"text", "label", "kind", "split"}, where kind is
// "<type>|<carrier>|<encoding>" (the format of ../shared/data/guard, a copy
// of whose secrets and PII files is in testdata). A row counts as detected
// when the scanner reports at least one finding the caller counts.
package eval

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/warden-sandbox/warden/internal/guard"
)

// Row is one labelled example.
type Row struct {
	Text  string `json:"text"`
	Label string `json:"label"`
	Kind  string `json:"kind"`
	Split string `json:"split"`
}

// Type is the first part of Kind, for example "iban_de".
func (r Row) Type() string { t, _, _ := strings.Cut(r.Kind, "|"); return t }

// Encoding is the last part of Kind, for example "base64".
func (r Row) Encoding() string {
	i := strings.LastIndexByte(r.Kind, '|')
	if i < 0 {
		return ""
	}
	return r.Kind[i+1:]
}

// Load reads rows from a JSONL file, gzipped when its name ends in ".gz",
// keeping those of split ("" keeps all).
func Load(path, split string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open eval data: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		defer z.Close()
		r = z
	}
	var rows []Row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var row Row
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if split == "" || row.Split == split {
			rows = append(rows, row)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return rows, nil
}

// Counts is a confusion matrix for one positive class.
type Counts struct{ TP, FP, FN, TN int }

// Precision is TP/(TP+FP), 1 when nothing was predicted.
func (c Counts) Precision() float64 {
	if c.TP+c.FP == 0 {
		return 1
	}
	return float64(c.TP) / float64(c.TP+c.FP)
}

// Recall is TP/(TP+FN), 1 when there were no positives.
func (c Counts) Recall() float64 {
	if c.TP+c.FN == 0 {
		return 1
	}
	return float64(c.TP) / float64(c.TP+c.FN)
}

// F1 is the harmonic mean of precision and recall.
func (c Counts) F1() float64 {
	p, r := c.Precision(), c.Recall()
	if p+r == 0 {
		return 0
	}
	return 2 * p * r / (p + r)
}

// Result is the outcome of one row.
type Result struct {
	Row      Row
	Findings []guard.Finding // the counted findings
}

// Hit reports whether the row was detected.
func (r Result) Hit() bool { return len(r.Findings) > 0 }

// Run inspects every row. count selects the findings that make a row
// positive (nil counts all).
func Run(s *guard.Scanner, rows []Row, count func(guard.Finding) bool) []Result {
	out := make([]Result, len(rows))
	for i, row := range rows {
		fs := s.Inspect(row.Text)
		if count != nil {
			kept := fs[:0]
			for _, f := range fs {
				if count(f) {
					kept = append(kept, f)
				}
			}
			fs = kept
		}
		out[i] = Result{Row: row, Findings: fs}
	}
	return out
}

// Tally counts results: positive is the label that means "present".
func Tally(res []Result, positive string) Counts {
	var c Counts
	for _, r := range res {
		pos := r.Row.Label == positive
		switch {
		case pos && r.Hit():
			c.TP++
		case pos:
			c.FN++
		case r.Hit():
			c.FP++
		default:
			c.TN++
		}
	}
	return c
}

// Filter keeps the results for which keep is true.
func Filter(res []Result, keep func(Result) bool) []Result {
	var out []Result
	for _, r := range res {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// ByType returns the recall counts of the positive rows per type, and the
// false positives per type of the negative rows.
func ByType(res []Result) map[string]Counts {
	m := map[string]Counts{}
	for _, r := range res {
		t := r.Row.Type() + " (" + r.Row.Label + ")"
		c := m[t]
		switch {
		case r.Row.Label != "none" && r.Hit():
			c.TP++
		case r.Row.Label != "none":
			c.FN++
		case r.Hit():
			c.FP++
		default:
			c.TN++
		}
		m[t] = c
	}
	return m
}

// Report writes a table of counts per group name.
func Report(w io.Writer, groups map[string]Counts) {
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\tTP\tFP\tFN\tTN\tprecision\trecall\tF1\t")
	for _, n := range names {
		c := groups[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t\n", n, c.TP, c.FP, c.FN, c.TN, c.Precision(), c.Recall(), c.F1())
	}
	tw.Flush()
}
