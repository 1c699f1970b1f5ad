package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFirstPaused: a paused sandbox's timeout does not run, and neither the
// CLI nor the API shows a countdown for it. `warden sandbox ls` shows the
// time it keeps on resume ("4s on resume"), `inspect` says so and shows no
// expiry time, the API's expires_at is null and resume_timeout_seconds
// says what a resume gives; the figure stays the same however long the
// sandbox stays paused, `sandbox timeout` while paused sets it, and a
// resume starts the countdown again from it.
func TestFirstPaused(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)

	out, errb, code := d.cli(t, "", "sandbox", "create", "--timeout", "4s")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: code %d, %q %q", code, out, errb)
	}
	t.Cleanup(func() { d.cli(t, "", "sandbox", "kill", id) })
	if out, errb, code := d.cli(t, "", "sandbox", "pause", id); code != 0 {
		t.Fatalf("pause: code %d, %q %q", code, out, errb)
	}

	lsRow := func() string {
		t.Helper()
		out, errb, code := d.cli(t, "", "sandbox", "ls")
		if code != 0 {
			t.Fatalf("ls: code %d, %q", code, errb)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, id) {
				return l
			}
		}
		t.Fatalf("ls does not list %s:\n%s", id, out)
		return ""
	}
	expiresLine := func() string {
		t.Helper()
		out, errb, code := d.cli(t, "", "sandbox", "inspect", id)
		if code != 0 {
			t.Fatalf("inspect: code %d, %q", code, errb)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "Expires") {
				return l
			}
		}
		t.Fatalf("inspect shows no Expires line:\n%s", out)
		return ""
	}
	apiView := func() map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctxT(t), "GET", d.url+"/v1/sandboxes/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+d.adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET sandbox: %d %v", resp.StatusCode, err)
		}
		return m
	}
	check := func(when, left string, secs float64) {
		t.Helper()
		row := lsRow()
		if !strings.Contains(row, "paused") || !strings.Contains(row, left+" on resume") || strings.Contains(row, " ago") || strings.Contains(row, "in ") {
			t.Errorf("%s: ls row %q, want %q and no countdown", when, row, left+" on resume")
		}
		line := expiresLine()
		if !strings.Contains(line, "not while paused ("+left+" left when resumed)") || strings.Contains(line, "ago") {
			t.Errorf("%s: inspect %q, want no expiry time and %s left when resumed", when, line, left)
		}
		m := apiView()
		if m["state"] != "paused" || m["expires_at"] != nil || m["resume_timeout_seconds"] != secs {
			t.Errorf("%s: API state %v expires_at %v resume_timeout_seconds %v, want paused, null, %v",
				when, m["state"], m["expires_at"], m["resume_timeout_seconds"], secs)
		}
	}
	check("just paused", "4s", 4)
	// Longer than the timeout: a running countdown would have passed.
	time.Sleep(6 * time.Second)
	check("paused past its timeout", "4s", 4)

	out, errb, code = d.cli(t, "", "sandbox", "timeout", id, "90s")
	if code != 0 || !strings.Contains(out, id+" is paused: it expires 90s after it is resumed") {
		t.Errorf("timeout while paused: code %d, %q %q", code, out, errb)
	}
	check("after sandbox timeout 90s", "90s", 90)

	if out, errb, code := d.cli(t, "", "sandbox", "resume", id); code != 0 {
		t.Fatalf("resume: code %d, %q %q", code, out, errb)
	}
	m := apiView()
	exp, _ := m["expires_at"].(string)
	at, err := time.Parse(time.RFC3339Nano, exp)
	if m["state"] != "running" || err != nil || m["resume_timeout_seconds"] != nil {
		t.Fatalf("after resume: state %v expires_at %v resume_timeout_seconds %v", m["state"], m["expires_at"], m["resume_timeout_seconds"])
	}
	// The countdown starts again at the resume from the 90s it kept: more
	// than the 4s timeout, at most 90s.
	if left := time.Until(at); left <= 4*time.Second || left > 90*time.Second {
		t.Errorf("after resume the sandbox has %s left, want the 90s it kept while paused", left)
	}
	row := lsRow()
	if !strings.Contains(row, "running") || !strings.Contains(row, "in ") {
		t.Errorf("ls after resume: %q, want a running countdown", row)
	}
}
