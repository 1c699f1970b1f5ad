package api

import "testing"

// TestCodeLanguagesRJava: the API accepts the r and java kernels (issue 18)
// and still refuses what it has no interpreter for.
func TestCodeLanguagesRJava(t *testing.T) {
	for in, want := range map[string]string{"r": "r", "R": "r", "java": "java", " Java ": "java"} {
		if got, err := normalizeLanguage(in); err != nil || got != want {
			t.Errorf("normalizeLanguage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := normalizeLanguage("ruby"); err == nil {
		t.Error("ruby accepted")
	}
}
