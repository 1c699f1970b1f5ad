package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// maxGuardEval bounds the labelled JSONL POST /v1/guard/eval reads.
const maxGuardEval = 32 << 20

// evalLabels are the labels each detector finds; any other label of a row
// ("none", "benign", another detector's) is a negative for it.
var evalLabels = map[string][]string{
	govern.DetectorSecrets:   {"secret"},
	govern.DetectorPII:       {"pii"},
	govern.DetectorInjection: {"injection", "jailbreak"},
}

type evalGroup struct {
	Label     string  `json:"label"`
	Detector  string  `json:"detector"`
	TP        int     `json:"tp"`
	FP        int     `json:"fp"`
	FN        int     `json:"fn"`
	TN        int     `json:"tn"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

type evalReport struct {
	Rows   int         `json:"rows"`
	Split  string      `json:"split,omitempty"`
	Groups []evalGroup `json:"groups"`
	// Confusion counts rows by true label, then by what was predicted:
	// the labels of the detectors that fired, joined with "+", or "none".
	Confusion   map[string]map[string]int `json:"confusion"`
	P50PerKiBUS float64                   `json:"p50_us_per_kib"`
	P99PerKiBUS float64                   `json:"p99_us_per_kib"`
}

// guardEval is POST /v1/guard/eval: the built-in detectors over labelled
// JSONL ({"text","label","split"} a line, the format of the guard corpus),
// reporting precision, recall and F1 per label and detector, the confusion
// matrix and the time per KiB. Nothing is stored; texts are never echoed.
func (s *Server) guardEval(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	split := q.Get("split")
	var names []string
	for _, d := range strings.Split(q.Get("detectors"), ",") {
		if d = strings.TrimSpace(d); d != "" {
			names = append(names, d)
		}
	}
	scan, err := govern.GuardScanner(names)
	if err != nil {
		return apierr.Validation("%s", err.Error())
	}
	if len(names) == 0 {
		names = []string{govern.DetectorSecrets, govern.DetectorPII, govern.DetectorInjection}
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxGuardEval))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apierr.PayloadTooLarge("request body too large: the limit is 32 MiB")
		}
		return apierr.BadRequest("read body: %v", err)
	}
	type row struct {
		Text  *string `json:"text"`
		Label string  `json:"label"`
		Split string  `json:"split"`
	}
	groups := map[[2]string]*evalGroup{}
	for _, d := range names {
		for _, l := range evalLabels[d] {
			groups[[2]string{l, d}] = &evalGroup{Label: l, Detector: d}
		}
	}
	rep := evalReport{Split: split, Confusion: map[string]map[string]int{}}
	var perKiB []float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), maxGuardEval)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var rw row
		if err := json.Unmarshal(line, &rw); err != nil || rw.Text == nil || rw.Label == "" {
			return apierr.Validation("line %d: want a JSON object with text and label", n)
		}
		if split != "" && rw.Split != split {
			continue
		}
		rep.Rows++
		start := time.Now()
		fs := scan(*rw.Text)
		el := time.Since(start)
		perKiB = append(perKiB, float64(el.Microseconds())*1024/math.Max(float64(len(*rw.Text)), 1))
		fired := map[string]string{} // detector -> predicted label
		for _, f := range fs {
			if _, ok := fired[f.Detector]; ok {
				continue
			}
			pred := evalLabels[f.Detector][0]
			if f.Detector == govern.DetectorInjection && f.Kind == "jailbreak" {
				pred = "jailbreak"
			}
			fired[f.Detector] = pred
		}
		for _, g := range groups {
			_, hit := fired[g.Detector]
			switch {
			case rw.Label == g.Label && hit:
				g.TP++
			case rw.Label == g.Label:
				g.FN++
			case slices.Contains(evalLabels[g.Detector], rw.Label):
				// another label of the same detector: neither
			case hit:
				g.FP++
			default:
				g.TN++
			}
		}
		var preds []string
		for _, p := range fired {
			if !slices.Contains(preds, p) {
				preds = append(preds, p)
			}
		}
		sort.Strings(preds)
		pred := strings.Join(preds, "+")
		if pred == "" {
			pred = "none"
		}
		if rep.Confusion[rw.Label] == nil {
			rep.Confusion[rw.Label] = map[string]int{}
		}
		rep.Confusion[rw.Label][pred]++
	}
	if err := sc.Err(); err != nil {
		return apierr.Validation("read JSONL: %v", err)
	}
	for _, g := range groups {
		g.Precision, g.Recall = ratio(g.TP, g.TP+g.FP), ratio(g.TP, g.TP+g.FN)
		if g.Precision+g.Recall > 0 {
			g.F1 = 2 * g.Precision * g.Recall / (g.Precision + g.Recall)
		}
		rep.Groups = append(rep.Groups, *g)
	}
	sort.Slice(rep.Groups, func(i, j int) bool {
		a, b := rep.Groups[i], rep.Groups[j]
		return a.Detector < b.Detector || (a.Detector == b.Detector && a.Label < b.Label)
	})
	if len(perKiB) > 0 {
		sort.Float64s(perKiB)
		rep.P50PerKiBUS = perKiB[len(perKiB)/2]
		rep.P99PerKiBUS = perKiB[min(len(perKiB)-1, len(perKiB)*99/100)]
	}
	stateOf(r).detail["rows"] = rep.Rows
	return writeJSON(w, http.StatusOK, rep)
}

// ratio is n/d, 1 when d is 0 (nothing predicted or nothing to find).
func ratio(n, d int) float64 {
	if d == 0 {
		return 1
	}
	return float64(n) / float64(d)
}
