package dockerfile

import (
	"strings"
	"testing"
	"time"
)

// TestLargeInputsAreFast guards against quadratic work on inputs near the
// size limit.
func TestLargeInputsAreFast(t *testing.T) {
	n := MaxSize/8 - 10
	inputs := map[string]string{
		"continuations":   "FROM a\nRUN a" + strings.Repeat("b \\\n", n/2),
		"comments":        "FROM a\nRUN a \\\n" + strings.Repeat("#\n", n*3),
		"empty cont":      "FROM a\nRUN a \\\n" + strings.Repeat(" \n", n*3),
		"env pairs":       "FROM a\nENV " + strings.Repeat("a=b ", n*2),
		"nested":          "FROM a\nENV a=" + strings.Repeat("${a:-", 99) + strings.Repeat("}", 99) + strings.Repeat("$a", n*3),
		"heredoc-ish":     "FROM a\nRUN " + strings.Repeat("<< ", n*2),
		"quotes":          "FROM a\nLABEL a=\"" + strings.Repeat("\\\"", n*3) + "\"",
		"instructions":    "FROM a\n" + strings.Repeat("RUN x\n", n),
		"expose":          "FROM a\nEXPOSE " + strings.Repeat("80 ", n*2),
		"json":            "FROM a\nCMD [" + strings.Repeat(`"a",`, n) + `"a"]`,
		"flags":           "FROM a\nCOPY " + strings.Repeat("--chown=a ", n/2),
		"arg":             "ARG " + strings.Repeat("a ", n*3) + "\nFROM a",
		"one long line":   "FROM a\nRUN " + strings.Repeat("x", MaxSize-20),
		"directive-like":  strings.Repeat("# escape=`x", 1) + strings.Repeat(" ", MaxSize-20),
		"blank lines":     strings.Repeat("\n", MaxSize-10) + "FROM a",
		"stage-name":      "FROM a AS " + strings.Repeat("a", MaxSize-20),
		"image reference": "FROM " + strings.Repeat("a/", MaxSize/2-10) + "a",
	}
	for name, src := range inputs {
		if len(src) > MaxSize {
			t.Fatalf("%s: input too large (%d)", name, len(src))
		}
		start := time.Now()
		Parse(strings.NewReader(src)) //nolint:errcheck
		d := time.Since(start)
		t.Logf("%s: %v", name, d)
		if d > 10*time.Second { // generous: this catches quadratic blow-ups, not slow machines
			t.Errorf("%s: Parse took %v", name, d)
		}
	}
}

func TestWarningsAreBounded(t *testing.T) {
	f := parse(t, "FROM a\n"+strings.Repeat("MAINTAINER x\n", 500)+"RUN a \\\n\n\n b\n")
	if len(f.Warnings) != maxWarnings+1 || !strings.Contains(f.Warnings[maxWarnings], "too many warnings") {
		t.Errorf("%d warnings, last %q", len(f.Warnings), f.Warnings[len(f.Warnings)-1])
	}
	f = parse(t, "FROM a\nRUN a \\\n\n\n b\n")
	if len(f.Warnings) != 1 {
		t.Errorf("empty continuation lines: %q", f.Warnings)
	}
}
