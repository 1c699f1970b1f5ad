package cli

import (
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestVolumeFlag(t *testing.T) {
	var f volumeFlag
	for _, s := range []string{"data:/data", "models:/models:ro", "w:/work:rw"} {
		if err := f.Set(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	want := []warden.VolumeMount{{Name: "data", Path: "/data"}, {Name: "models", Path: "/models", ReadOnly: true}, {Name: "w", Path: "/work"}}
	if len(f.v) != len(want) {
		t.Fatalf("got %+v", f.v)
	}
	for i := range want {
		if f.v[i] != want[i] {
			t.Errorf("%d: got %+v, want %+v", i, f.v[i], want[i])
		}
	}
	for _, bad := range []string{"data", "data:rel", ":/x", ""} {
		if err := (&volumeFlag{}).Set(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestVolumeRef(t *testing.T) {
	for s, want := range map[string]bool{"data:/a/b": true, "./file": false, "/abs/path": false, "C:\\x": false, "data:rel": false, "-": false} {
		if _, _, ok := volumeRef(s); ok != want {
			t.Errorf("volumeRef(%q) = %v, want %v", s, ok, want)
		}
	}
}
