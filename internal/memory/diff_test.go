package memory

import (
	"fmt"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	lines := func(n int, change map[int]string) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			if s, ok := change[i]; ok {
				if s != "" {
					b.WriteString(s + "\n")
				}
				continue
			}
			b.WriteString(fmt.Sprintf("l%d\n", i))
		}
		return b.String()
	}
	cases := []struct {
		name, a, b, want string
	}{
		{"equal", "x\ny\n", "x\ny\n", ""},
		{"from empty", "", "one\ntwo", "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+one\n+two\n"},
		{"to empty", "one\n", "", "--- a\n+++ b\n@@ -1 +0,0 @@\n-one\n"},
		{"middle", "a\nb\nc\n", "a\nB\nc\n", "--- a\n+++ b\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"two hunks", lines(20, map[int]string{2: "two"}), lines(20, map[int]string{2: "TWO", 19: "nineteen"}),
			"--- a\n+++ b\n@@ -1,5 +1,5 @@\n l1\n-two\n+TWO\n l3\n l4\n l5\n" +
				"@@ -16,5 +16,5 @@\n l16\n l17\n l18\n-l19\n+nineteen\n l20\n"},
	}
	for _, c := range cases {
		if got := unified("a", "b", c.a, c.b); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	// Too large for the table: everything out, everything in.
	big := strings.Repeat("x\n", 3000)
	got := unified("a", "b", big, strings.Repeat("y\n", 3000))
	if strings.Count(got, "\n-x") != 3000 || strings.Count(got, "\n+y") != 3000 {
		t.Fatalf("large diff: %d lines", strings.Count(got, "\n"))
	}
}
