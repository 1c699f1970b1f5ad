package inject

import (
	"sort"
	"testing"
)

// TestHeuristicRulesOnTrain keeps the heuristics a tripwire that benign text
// rarely trips: each rule may fire on at most 0.5% of the benign texts of
// the training split (where they were tuned). It logs each rule's hits.
func TestHeuristicRulesOnTrain(t *testing.T) {
	train := readSplit(t, "train")
	type count struct{ benign, attack int }
	counts := map[string]*count{}
	nBenign := 0
	for _, ex := range train {
		if ex.Label == LabelBenign {
			nBenign++
		}
		seen := map[string]bool{}
		for _, h := range heuristics(ex.Text, nil, 1) {
			if seen[h.Rule] {
				continue
			}
			seen[h.Rule] = true
			c := counts[h.Rule]
			if c == nil {
				c = &count{}
				counts[h.Rule] = c
			}
			if ex.Label == LabelBenign {
				c.benign++
				if testing.Verbose() && c.benign <= 3 {
					t.Logf("%s on benign %q", h.Rule, clip(ex.Text[max(0, h.Start-60):min(len(ex.Text), h.End+60)]))
				}
			} else {
				c.attack++
			}
		}
	}
	var names []string
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := counts[n]
		t.Logf("%-22s attacks %4d  benign %3d/%d", n, c.attack, c.benign, nBenign)
		if float64(c.benign) > 0.005*float64(nBenign) {
			t.Errorf("rule %s fires on %d of %d benign training texts", n, c.benign, nBenign)
		}
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300]
	}
	return s
}
