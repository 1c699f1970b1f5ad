package cli

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestVolumeSnapshotCommands: snapshot create, ls, rm, restore and create
// --from reach their routes with their bodies.
func TestVolumeSnapshotCommands(t *testing.T) {
	d := newFakeDaemon(t)
	var bodies []string
	body := func(r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		b, _ := json.Marshal(m)
		bodies = append(bodies, string(b))
	}
	snap := map[string]any{"id": "vsn-1", "name": "s1", "volume": "data", "volume_id": "vol-1", "size_bytes": 16 << 20, "stored_bytes": 1 << 20, "created_at": testNow}
	vol := map[string]any{"id": "vol-1", "name": "data", "owner": "p", "size_bytes": 16 << 20, "created_at": testNow}
	d.handle("POST /v1/volumes/data/snapshots", func(w http.ResponseWriter, r *http.Request) { body(r); writeJSON(w, 201, snap) })
	d.json("GET /v1/volumes/data/snapshots", 200, map[string]any{"snapshots": []any{snap}})
	d.handle("DELETE /v1/volumes/data/snapshots/s1", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	d.handle("POST /v1/volumes/data/restore", func(w http.ResponseWriter, r *http.Request) { body(r); writeJSON(w, 200, vol) })
	d.handle("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) { body(r); writeJSON(w, 201, vol) })
	d.apiError("POST /v1/volumes/busy/restore", 409, "conflict", "volume is in use")

	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"volume", "snapshot", "create", "data", "s1"}, "s1\n"},
		{[]string{"volume", "snapshot", "create", "data"}, "s1\n"},
		{[]string{"volume", "snapshot", "ls", "data"}, "s1"},
		{[]string{"volume", "snapshot", "rm", "data", "s1"}, "s1\n"},
		{[]string{"volume", "restore", "data", "s1"}, "data restored from s1\n"},
		{[]string{"volume", "create", "copy", "--from", "data/s1"}, "data\n"},
	} {
		r := run(t, d, c.args...)
		if r.code != 0 || !strings.Contains(r.stdout, c.out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, r.code, r.stdout, r.stderr)
		}
	}
	want := []string{`{"name":"s1"}`, `{}`, `{"snapshot":"s1"}`, `{"from_snapshot":{"snapshot":"s1","volume":"data"},"name":"copy"}`}
	if !slices.Equal(bodies, want) {
		t.Errorf("bodies %q, want %q", bodies, want)
	}
	if r := run(t, d, "volume", "restore", "busy", "s1"); r.code == 0 || !strings.Contains(r.stderr, "in use") {
		t.Errorf("restore of a mounted volume: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{
		{"volume", "create", "x", "--from", "nosnap"},
		{"volume", "create", "x", "--from", "a/b", "--size", "1g"},
		{"volume", "restore", "data"},
		{"volume", "snapshot", "rm", "data"},
	} {
		if r := run(t, d, bad...); r.code == 0 {
			t.Errorf("%v: exit 0", bad)
		}
	}
}
