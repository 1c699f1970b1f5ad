package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestImportProgressLines renders a layer's events as a pipe (not a
// terminal) sees them, with a clock the test moves: phase names as people
// read them and a rate taken from the layer's own time.
func TestImportProgressLines(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1000, 0)
	p := &progress{w: &buf, now: func() time.Time { return clock }}
	ev := func(phase string, cur, total int64, cached bool, idx int) warden.TemplateEvent {
		return warden.TemplateEvent{Type: "progress", Phase: phase, Layer: "sha256:0123456789abcdef", Index: idx, Count: 2,
			Current: cur, Total: total, Cached: cached}
	}
	p.event(ev("done", 0, 0, true, 0))
	p.event(ev("download", 0, 8<<20, false, 1))
	clock = clock.Add(time.Second)
	p.event(ev("download", 4<<20, 8<<20, false, 1))
	clock = clock.Add(time.Second)
	p.event(ev("download", 8<<20, 8<<20, false, 1))
	p.event(ev("extract", 8<<20, 8<<20, false, 1))
	p.event(ev("done", 8<<20, 8<<20, false, 1))
	want := strings.Join([]string{
		"layer 1/2 0123456789ab: already stored",
		"layer 2/2 0123456789ab: extracting 8.0 MiB",
		"layer 2/2 0123456789ab: verifying 8.0 MiB",
		"layer 2/2 0123456789ab: 8.0 MiB read and extracted in 2.0 s (4.0 MiB/s)",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("progress lines:\n%s\nwant:\n%s", got, want)
	}
}

func TestRate(t *testing.T) {
	for _, c := range []struct {
		n    int64
		d    time.Duration
		want string
	}{
		{0, time.Second, ""},
		{1 << 20, 0, ""},
		{1 << 20, time.Second, "1.0 MiB/s"},
		{3 << 30, 2 * time.Second, "1.50 GiB/s"},
	} {
		if got := rate(c.n, c.d); got != c.want {
			t.Errorf("rate(%d, %v) = %q, want %q", c.n, c.d, got, c.want)
		}
	}
}
