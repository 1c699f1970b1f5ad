package benchstat

import (
	"bytes"
	"image/color"
	"image/png"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var s Series
	for i := 1; i <= 100; i++ {
		s.Add(time.Duration(i) * time.Millisecond)
	}
	if got := s.Quantile(0.5); got != 50*time.Millisecond {
		t.Fatalf("p50 = %v", got)
	}
	if got := s.Quantile(0.99); got != 99*time.Millisecond {
		t.Fatalf("p99 = %v", got)
	}
	if got := s.Quantile(1); got != 100*time.Millisecond {
		t.Fatalf("max = %v", got)
	}
	var b Series
	b.Add(25 * time.Millisecond)
	if r := s.Summarize(&b).Ratio; r != 2 {
		t.Fatalf("ratio = %v", r)
	}
}

func TestChart(t *testing.T) {
	a := &Series{Name: "fast"}
	b := &Series{Name: "slow"}
	for i := 1; i <= 100; i++ {
		a.Add(time.Duration(i) * 50 * time.Microsecond)
		b.Add(time.Duration(i) * 2 * time.Millisecond)
	}
	var buf bytes.Buffer
	if err := Chart(&buf, "test", []*Series{a, b, {Name: "empty"}}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// The two curves are drawn in their colours.
	seen := map[color.RGBA]bool{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 0xff}] = true
		}
	}
	if !seen[palette[0]] || !seen[palette[1]] {
		t.Error("a series' curve is missing from the chart")
	}
	if err := Chart(&buf, "none", nil); err == nil {
		t.Error("a chart without samples was drawn")
	}
}
