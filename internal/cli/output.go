package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON followed by a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns; cells are separated by tabs.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// fields writes "NAME  value" lines aligned on the values, for single objects.
type fields struct {
	tw *tabwriter.Writer
}

func newFields(w io.Writer) *fields {
	return &fields{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (f *fields) add(name, value string) { fmt.Fprintf(f.tw, "%s:\t%s\n", name, value) }
func (f *fields) flush() error           { return f.tw.Flush() }

// shortDuration writes d compactly, rounded down, more precisely the shorter it is (as
// kubectl does): 45s, 3m20s, 90m, 5h30m, 30h, 3d4h, 12d.
func shortDuration(d time.Duration) string {
	s := int(d / time.Second)
	m, h, days := s/60, s/3600, s/86400
	both := func(a int, ua string, b int, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, ua)
		}
		return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
	}
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", s)
	case d < 10*time.Minute:
		return both(m, "m", s%60, "s")
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", m)
	case d < 8*time.Hour:
		return both(h, "h", m%60, "m")
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", h)
	case d < 8*24*time.Hour:
		return both(days, "d", h%24, "h")
	default:
		return fmt.Sprintf("%dd", days)
	}
}

// age writes how long ago t was; "-" for the zero time.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return shortDuration(d)
}

// relative writes t relative to now: "3m ago" or "in 5m".
func relative(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	// Round to the second: a timeout of 1h set a moment ago expires "in 60m", not "in 59m".
	if d := t.Sub(now).Round(time.Second); d > 0 {
		return "in " + shortDuration(d)
	}
	return shortDuration(now.Sub(t).Round(time.Second)) + " ago"
}

// timestamp writes t as RFC 3339 in local time with a relative hint; "-" for zero.
func timestamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339) + " (" + relative(t, now) + ")"
}

// shortTime writes t to the minute in local time, for listings.
func shortTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

// bytesIEC writes n bytes with a binary unit: 512 B, 1.5 KiB, 12.0 MiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// kvList writes a map as k=v pairs sorted by key, comma-separated; "-" when empty.
func kvList(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

// truncate cuts s to at most n runes, ending with "..." when cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
