package benchstat

import (
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
