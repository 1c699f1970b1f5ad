package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
)

func decodeErrorBody(t *testing.T, resp *http.Response) apierr.Body {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body apierr.Body
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
		t.Fatalf("%d response is not a JSON error body: %q (%v)", resp.StatusCode, b, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q", ct)
	}
	return body
}

// TestMalformedRequests sends requests a client should never send and
// checks each gets a 4xx JSON error with the right code, and that the daemon
// stays healthy.
func TestMalformedRequests(t *testing.T) {
	sb := "/v1/sandboxes/" + env.sbA
	const (
		agent = iota
		admin
		none
	)
	huge := `{"metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
	cases := []struct {
		name    string
		method  string
		path    string
		body    string
		key     int
		header  map[string]string
		status  int
		code    string
		message string // substring of the message, if set
	}{
		{"truncated JSON", "POST", "/v1/sandboxes", `{"template":`, agent, nil, 400, "invalid_json", "unexpected end"},
		{"not JSON", "POST", "/v1/sandboxes", `template=base`, agent, nil, 400, "invalid_json", ""},
		{"wrong type", "POST", "/v1/sandboxes", `{"template":5}`, agent, nil, 400, "bad_request", "template"},
		{"unknown field", "POST", "/v1/sandboxes", `{"tempalte":"base"}`, agent, nil, 400, "bad_request", "tempalte"},
		{"invalid UTF-8", "POST", "/v1/sandboxes", "{\"metadata\":{\"k\":\"\xff\xfe\"}}", agent, nil, 400, "invalid_json", "UTF-8"},
		{"field in another case", "POST", "/v1/sandboxes", `{"Template":"base"}`, agent, nil, 400, "bad_request", "Template"},
		{"repeated field", "POST", "/v1/sandboxes", `{"template":"base","template":"evil"}`, agent, nil, 400, "bad_request", "twice"},
		{"trailing data", "POST", "/v1/sandboxes", `{} {"template":"x"}`, agent, nil, 400, "invalid_json", "trailing"},
		{"array body", "POST", "/v1/sandboxes", `[1,2]`, agent, nil, 400, "bad_request", "object"},
		{"huge body", "POST", "/v1/sandboxes", huge, agent, nil, 413, "payload_too_large", ""},
		{"negative memory", "POST", "/v1/sandboxes", `{"memory_mb":-5}`, agent, nil, 422, "validation_failed", "memory_mb"},
		{"absurd cpu", "POST", "/v1/sandboxes", `{"cpu_millis":99999999999999999999}`, agent, nil, 400, "bad_request", "cpu_millis"},
		{"fractional cpu", "POST", "/v1/sandboxes", `{"cpu_millis":1.5}`, agent, nil, 400, "bad_request", "cpu_millis"},
		{"timeout too long", "POST", "/v1/sandboxes", `{"timeout_seconds":100000}`, agent, nil, 422, "validation_failed", "timeout must be between 1 and 86400 seconds"},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"no-such-template"}`, agent, nil, 422, "validation_failed", "no-such-template"},
		{"metadata key with comma", "POST", "/v1/sandboxes", `{"metadata":{"a,b":"x"}}`, agent, nil, 422, "validation_failed", "metadata"},
		{"env with NUL", "POST", "/v1/sandboxes", `{"env":{"A":"x\u0000y"}}`, agent, nil, 422, "validation_failed", "NUL"},
		{"limit zero", "GET", "/v1/sandboxes?limit=0", "", agent, nil, 422, "validation_failed", "limit"},
		{"limit negative", "GET", "/v1/sandboxes?limit=-1", "", agent, nil, 422, "validation_failed", "limit"},
		{"limit absurd", "GET", "/v1/sandboxes?limit=100000000000", "", agent, nil, 422, "validation_failed", "limit"},
		{"limit not a number", "GET", "/v1/sandboxes?limit=ten", "", agent, nil, 400, "bad_request", "limit"},
		{"unknown state", "GET", "/v1/sandboxes?state=exploded", "", agent, nil, 422, "validation_failed", "state"},
		{"forged page token", "GET", "/v1/sandboxes?page_token=Zm9yZ2Vk", "", agent, nil, 400, "bad_request", ""},
		{"bad metadata filter", "GET", "/v1/sandboxes?metadata=novalue", "", agent, nil, 400, "bad_request", "metadata"},
		{"no credentials", "GET", "/v1/sandboxes", "", none, nil, 401, "unauthenticated", ""},
		{"basic auth", "GET", "/v1/sandboxes", "", none, map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, 401, "unauthenticated", ""},
		{"forged key", "GET", "/v1/sandboxes", "", none, map[string]string{"Authorization": "Bearer wdn_abcdefgh_" + strings.Repeat("Z", 32)}, 401, "unauthenticated", ""},
		{"path traversal", "GET", sb + "/files?path=/home/user/../../etc/shadow", "", agent, nil, 400, "bad_request", ".."},
		{"relative path", "GET", sb + "/files?path=etc/passwd", "", agent, nil, 400, "bad_request", "absolute"},
		{"NUL in path", "GET", sb + "/files?path=/etc/pass%00wd", "", agent, nil, 400, "bad_request", "NUL"},
		{"missing path", "GET", sb + "/fs/stat", "", agent, nil, 400, "bad_request", "path"},
		{"traversal in mkdir", "POST", sb + "/fs/mkdir", `{"path":"/tmp/../root/x"}`, agent, nil, 400, "bad_request", ".."},
		{"traversal in move", "POST", sb + "/fs/move", `{"source":"/tmp/a","destination":"/tmp/./b"}`, agent, nil, 400, "bad_request", "destination"},
		{"move without source", "POST", sb + "/fs/move", `{"destination":"/tmp/b"}`, agent, nil, 400, "bad_request", "source"},
		{"negative depth", "GET", sb + "/fs/list?path=/&depth=-1", "", agent, nil, 422, "validation_failed", "depth"},
		{"bad file mode", "PUT", sb + "/files?path=/tmp/x&mode=999", "x", agent, nil, 400, "bad_request", "mode"},
		{"empty cmd", "POST", sb + "/exec", `{"cmd":[]}`, agent, nil, 422, "validation_failed", "cmd"},
		{"cmd and command", "POST", sb + "/exec", `{"cmd":["ls"],"command":"ls"}`, agent, nil, 422, "validation_failed", "exactly one"},
		{"neither cmd nor command", "POST", sb + "/exec", `{}`, agent, nil, 400, "bad_request", "cmd"},
		{"empty exec body", "POST", sb + "/exec", ``, agent, nil, 400, "invalid_json", ""},
		{"cmd as string", "POST", sb + "/exec", `{"cmd":"ls -l"}`, agent, nil, 400, "bad_request", "cmd"},
		{"NUL in argv", "POST", sb + "/exec", `{"cmd":["ls","a\u0000b"]}`, agent, nil, 422, "validation_failed", "NUL"},
		{"negative exec timeout", "POST", sb + "/exec", `{"cmd":["true"],"timeout_seconds":-1}`, agent, nil, 422, "validation_failed", "timeout_seconds"},
		{"bad pid", "POST", sb + "/processes/abc/signal", `{"signal":"SIGTERM"}`, agent, nil, 400, "bad_request", "pid"},
		{"zero pid", "GET", sb + "/processes/0/stream", "", agent, nil, 400, "bad_request", "pid"},
		{"unknown signal", "POST", sb + "/processes/1/signal", `{"signal":"SIGBOGUS"}`, agent, nil, 422, "validation_failed", "signal"},
		{"huge stdin", "POST", sb + "/processes/1/stdin", strings.Repeat("x", 2<<20), agent, nil, 413, "payload_too_large", ""},
		{"timeout as string", "POST", sb + "/timeout", `{"timeout_seconds":"60"}`, agent, nil, 400, "bad_request", "timeout_seconds"},
		{"timeout missing", "POST", sb + "/timeout", `{}`, agent, nil, 400, "bad_request", "timeout_seconds"},
		{"pty without upgrade", "GET", sb + "/pty", "", agent, nil, 400, "bad_request", "WebSocket"},
		{"pty zero cols", "GET", sb + "/pty?cols=0", "", agent, nil, 422, "validation_failed", "cols"},
		{"presign bad op", "POST", sb + "/files/presign", `{"path":"/tmp/x","op":"delete"}`, agent, nil, 422, "validation_failed", "op"},
		{"presign absurd lifetime", "POST", sb + "/files/presign", `{"path":"/tmp/x","op":"read","expires_seconds":99999999}`, agent, nil, 422, "validation_failed", "expires_seconds"},
		{"presigned without signature", "GET", "/v1/presigned/files?sandbox=" + env.sbA + "&path=/etc/hostname&op=read", "", none, nil, 403, "forbidden", ""},
		{"key without scopes", "POST", "/v1/keys", `{"scopes":[]}`, admin, nil, 422, "validation_failed", "scope"},
		{"principal without kind", "POST", "/v1/principals", `{"name":"x"}`, admin, nil, 400, "bad_request", "kind"},
		{"negative audit cursor", "GET", "/v1/audit?after=-1", "", admin, nil, 422, "validation_failed", "after"},
		{"unknown route", "GET", "/v1/nothing-here", "", agent, nil, 404, "not_found", ""},
		{"unknown method", "PATCH", "/v1/sandboxes", "", agent, nil, 404, "not_found", ""},
		{"dot segments in the URL", "GET", "/v1/sandboxes/../keys", "", agent, nil, 400, "bad_request", "not clean"},
		{"NUL sandbox id", "GET", "/v1/sandboxes/%00", "", agent, nil, 404, "not_found", ""},
		{"metrics without a key", "GET", "/metrics", "", none, nil, 401, "unauthenticated", ""},
		{"metrics without the scope", "GET", "/metrics", "", agent, nil, 403, "forbidden", "metrics:read"},
	}
	keys := map[int]string{agent: env.aKey, admin: env.adminKey}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, env.hs.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if k := keys[tc.key]; k != "" {
				req.Header.Set("Authorization", "Bearer "+k)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := decodeErrorBody(t, resp)
			if resp.StatusCode != tc.status || body.Error.Code != tc.code {
				t.Fatalf("got %d %s (%q), want %d %s", resp.StatusCode, body.Error.Code, body.Error.Message, tc.status, tc.code)
			}
			if !strings.Contains(body.Error.Message, tc.message) {
				t.Errorf("message %q lacks %q", body.Error.Message, tc.message)
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" || body.Error.RequestID != id {
				t.Errorf("request id: header %q, body %q", id, body.Error.RequestID)
			}
		})
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
	ctx := ctxT(t, 10*time.Second)
	if h, err := env.a.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("daemon unhealthy after malformed requests: %+v %v", h, err)
	}
	if _, err := env.a.GetSandbox(ctx, env.sbA); err != nil {
		t.Fatal(err)
	}
}
