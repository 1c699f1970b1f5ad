package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestSandboxURL(t *testing.T) {
	d := newFakeDaemon(t)
	var bodies []string
	public := false
	d.handle("POST /v1/sandboxes/sb-1/ports/8000/url", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		writeJSON(w, 200, warden.Preview{URL: "http://d/v1/sandboxes/sb-1/ports/8000/proxy/?warden_token=t",
			ExpiresAt: testNow.Add(time.Hour), Public: public})
	})
	d.handle("POST /v1/sandboxes/sb-1/ports/8000", func(w http.ResponseWriter, r *http.Request) {
		var q struct{ Public bool }
		json.NewDecoder(r.Body).Decode(&q)
		public = q.Public
		writeJSON(w, 200, warden.Port{SandboxID: "sb-1", Port: 8000, Public: q.Public,
			URL: "http://d/v1/sandboxes/sb-1/ports/8000/proxy/", HostURL: "http://8000-sb-1.p.example/"})
	})
	d.json("POST /v1/sandboxes/sb-1/ports/8001/url", 200, warden.Preview{URL: "http://d/path", HostURL: "http://8001-sb-1.p.example/?warden_token=t"})

	if res := run(t, d, "sandbox", "url", "sb-1", "8000", "--ttl", "24h"); res.code != 0 || res.stdout != "http://d/v1/sandboxes/sb-1/ports/8000/proxy/?warden_token=t\n" {
		t.Errorf("signed: code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := run(t, d, "sandbox", "url", "sb-1", "8001"); res.code != 0 || res.stdout != "http://8001-sb-1.p.example/?warden_token=t\n" {
		t.Errorf("by host: code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := run(t, d, "sandbox", "url", "sb-1", "8000", "--public"); res.code != 0 || res.stdout != "http://8000-sb-1.p.example/\n" || !public {
		t.Errorf("public: code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	res := run(t, d, "sandbox", "url", "sb-1", "8000", "--private", "--json")
	var p warden.Preview
	if res.code != 0 || public || json.Unmarshal([]byte(res.stdout), &p) != nil || p.Public || !strings.Contains(p.URL, "warden_token=") {
		t.Errorf("private: code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if len(bodies) != 2 || bodies[0] != `{"expires_seconds":86400}` || bodies[1] != `{}` {
		t.Errorf("url request bodies %q", bodies)
	}
	for _, args := range [][]string{
		{"sb-1"}, {"sb-1", "0"}, {"sb-1", "65536"}, {"sb-1", "http"},
		{"sb-1", "8000", "--public", "--private"}, {"sb-1", "8000", "--public", "--ttl", "1h"},
	} {
		if res := run(t, d, append([]string{"sandbox", "url"}, args...)...); res.code != 2 {
			t.Errorf("%v: code %d stderr %q", args, res.code, res.stderr)
		}
	}
}
