// Package benchstat collects latency samples and prints the medians,
// percentiles and baseline ratios Warden's benchmarks report.
package benchstat

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

// Series is a named set of latency samples.
type Series struct {
	Name    string
	Samples []time.Duration
}

// Add records one sample.
func (s *Series) Add(d time.Duration) { s.Samples = append(s.Samples, d) }

// Time runs fn n times and records each duration; it stops at the first error.
func (s *Series) Time(n int, fn func() error) error {
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("%s, run %d: %w", s.Name, i, err)
		}
		s.Add(time.Since(t0))
	}
	return nil
}

// Quantile returns the q-quantile (0..1) by the nearest-rank method.
func (s *Series) Quantile(q float64) time.Duration {
	if len(s.Samples) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), s.Samples...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(math.Ceil(q*float64(len(c)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(c) {
		i = len(c) - 1
	}
	return c[i]
}

// Summary is the printed figures of a series.
type Summary struct {
	Name  string  `json:"name"`
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Ratio float64 `json:"ratio_to_baseline,omitempty"` // p50 / baseline p50
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Summarize computes a summary; baseline may be nil.
func (s *Series) Summarize(baseline *Series) Summary {
	sum := Summary{Name: s.Name, N: len(s.Samples), P50: ms(s.Quantile(0.5)), P90: ms(s.Quantile(0.9)), P99: ms(s.Quantile(0.99)), Max: ms(s.Quantile(1))}
	if baseline != nil && baseline.Quantile(0.5) > 0 {
		sum.Ratio = float64(s.Quantile(0.5)) / float64(baseline.Quantile(0.5))
	}
	return sum
}

// Print writes a Markdown table of summaries.
func Print(w io.Writer, baselineName string, sums []Summary) {
	fmt.Fprintf(w, "| measurement | n | p50 ms | p90 ms | p99 ms | max ms | p50 / %s |\n", baselineName)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, s := range sums {
		ratio := "—"
		if s.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", s.Ratio)
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f | %.2f | %s |\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, ratio)
	}
}
