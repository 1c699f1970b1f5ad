package cli

import "testing"

// TestLangOfFileRJava: -f picks r for .r/.R and java for .java/.jsh.
func TestLangOfFileRJava(t *testing.T) {
	for name, want := range map[string]string{"a.r": "r", "b.R": "r", "C.java": "java", "s.jsh": "java", "x.py": ""} {
		if got := langOfFile(name); got != want {
			t.Errorf("langOfFile(%q) = %q, want %q", name, got, want)
		}
	}
}
