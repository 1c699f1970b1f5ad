package image

import (
	"flag"
	"os"
	"testing"
)

// TestMain caps how long the fuzzer minimizes each new interesting input
// (default 60s) unless -fuzzminimizetime is given: FuzzApplyLayer inputs are
// tar archives of a few KiB, and minimizing one byte at a time would
// otherwise fill a short -fuzztime run (the executions still run the full
// checks, but no new inputs are explored meanwhile).
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.fuzzminimizetime" {
			set = true
		}
	})
	if !set {
		flag.Set("test.fuzzminimizetime", "3s")
	}
	os.Exit(m.Run())
}
