package cli

import (
	"testing"
	"time"
)

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                               "0s",
		45 * time.Second:                "45s",
		119 * time.Second:               "119s",
		200 * time.Second:               "3m20s",
		5 * time.Minute:                 "5m",
		90 * time.Minute:                "90m",
		5*time.Hour + 30*time.Minute:    "5h30m",
		6 * time.Hour:                   "6h",
		30 * time.Hour:                  "30h",
		76 * time.Hour:                  "3d4h",
		72 * time.Hour:                  "3d",
		12 * 24 * time.Hour:             "12d",
		12*24*time.Hour + 5*time.Minute: "12d",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestBytesIEC(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 12 << 20: "12.0 MiB", 3 << 29: "1.5 GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRelative(t *testing.T) {
	if got := relative(testNow.Add(5*time.Minute), testNow); got != "in 5m" {
		t.Errorf("future: %q", got)
	}
	if got := relative(testNow.Add(-5*time.Minute), testNow); got != "5m ago" {
		t.Errorf("past: %q", got)
	}
	if got := relative(time.Time{}, testNow); got != "-" {
		t.Errorf("zero: %q", got)
	}
}
