package integration

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestFirstE2BDefault: wardend serves the E2B-compatible API on
// 127.0.0.1:3000 without being asked, and prints the SDK settings at start;
// when that port is taken it still starts, says so and how to move it;
// --e2b-listen moves it and --e2b-listen "" turns it off.
func TestFirstE2BDefault(t *testing.T) {
	const def = "127.0.0.1:3000"
	// e2bList lists sandboxes through the E2B API at addr, as E2B's SDKs do.
	e2bList := func(t *testing.T, addr, key string) (int, error) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/sandboxes", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var list []map[string]any
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
				return resp.StatusCode, err
			}
		}
		return resp.StatusCode, nil
	}
	// The port taken first (by this test when it is free, else by whoever
	// holds it): the daemon starts anyway and warns.
	hold, holdErr := net.Listen("tcp", def)
	t.Run("default port taken", func(t *testing.T) {
		state, run := newDirs(t)
		d := startDaemon(t, state, run, e2bDefault)
		if out, errOut, code := d.cli(t, "", "sandbox", "ls"); code != 0 {
			t.Fatalf("the main API does not serve: %d %s %s", code, out, errOut)
		}
		if log := d.log.String(); !strings.Contains(log, "the E2B-compatible API is off: its default address is in use") || !strings.Contains(log, "--e2b-listen") {
			t.Fatalf("no clear warning about the taken E2B port:\n%s", log)
		}
	})
	if holdErr != nil {
		t.Logf("%s is held by another process (%v): the default-address serving case needs it free", def, holdErr)
	} else {
		hold.Close()
		t.Run("default", func(t *testing.T) {
			state, run := newDirs(t)
			d := startDaemon(t, state, run, e2bDefault)
			if code, err := e2bList(t, def, d.adminKey); err != nil || code != 200 {
				t.Fatalf("E2B API at the default %s: %d %v\n%s", def, code, err, d.log)
			}
			if code, _ := e2bList(t, def, "wk_not-a-key"); code != 401 {
				t.Fatalf("E2B API with a bad key: %d, want 401", code)
			}
			if log := d.log.String(); !strings.Contains(log, "serving the E2B-compatible API") || !strings.Contains(log, "E2B_API_URL=http://"+def) || !strings.Contains(log, "E2B_SANDBOX_URL=http://"+def) {
				t.Fatalf("the start log does not print the E2B settings:\n%s", log)
			}
		})
	}
	t.Run("moved", func(t *testing.T) {
		state, run := newDirs(t)
		addr := freePort(t)
		d := startDaemon(t, state, run, "--e2b-listen", addr)
		if code, err := e2bList(t, addr, d.adminKey); err != nil || code != 200 {
			t.Fatalf("E2B API at %s: %d %v", addr, code, err)
		}
	})
	t.Run("off", func(t *testing.T) {
		state, run := newDirs(t)
		d := startDaemon(t, state, run, "--e2b-listen", "")
		if strings.Contains(d.log.String(), "E2B") {
			t.Fatalf("--e2b-listen \"\" still mentions the E2B API:\n%s", d.log)
		}
	})
}
