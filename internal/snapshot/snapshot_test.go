package snapshot

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"good", "a", "good-state.v1_2", strings.Repeat("a", 63), newID()} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Good", "-x", ".x", "a/b", "a:b", "sha256:00", strings.Repeat("a", 64), "a b"} {
		if err := CheckName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckName(%q): %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestSortedTargets(t *testing.T) {
	got := sortedTargets(map[string]string{"/usr": "", "/opt": "", "/": ""})
	if want := []string{"/", "/opt", "/usr"}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}
