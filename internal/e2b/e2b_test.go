package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
)

func TestControlPlane(t *testing.T) {
	needsRealSandbox(t)
	sb := create(t, env.aKey, map[string]any{"templateID": "base", "timeout": 120,
		"metadata": map[string]string{"k y": "v&1", "suite": "e2b"}, "envVars": map[string]string{"GREETING": "hello"}})
	if !strings.HasPrefix(sb.SandboxID, "sb-") || sb.TemplateID != "base" || sb.ClientID == "" ||
		sb.EnvdVersion != EnvdVersion || sb.EnvdAccessToken != env.srv.EnvdToken(stored(t, sb.SandboxID)) ||
		sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == "" {
		t.Fatalf("create response: %+v", sb)
	}

	// 2.45's POST /sandboxes, with an E2B default template name.
	st, _, b := api(t, env.aKey, "POST", "/sandboxes", map[string]any{"templateID": "code-interpreter-v1", "timeout": 300, "secure": true, "allow_internet_access": true})
	if st != http.StatusCreated {
		t.Fatalf("POST /sandboxes: %d %s", st, b)
	}
	var v1 created
	decodeJSON(t, b, &v1)
	defer env.mgr.Kill(t.Context(), v1.SandboxID, "test cleanup")
	if v1.TemplateID != "base" {
		t.Errorf("code-interpreter-v1 resolved to %q, want base", v1.TemplateID)
	}

	// getInfo
	st, _, b = api(t, env.aKey, "GET", "/sandboxes/"+sb.SandboxID, nil)
	if st != http.StatusOK {
		t.Fatalf("get: %d %s", st, b)
	}
	var d struct {
		SandboxID, TemplateID, ClientID, EnvdVersion, EnvdAccessToken, State string
		StartedAt, EndAt                                                     time.Time
		CPUCount, MemoryMB, DiskSizeMB                                       *int64
		Metadata                                                             map[string]string
	}
	decodeJSON(t, b, &d)
	if d.SandboxID != sb.SandboxID || d.State != "running" || d.Metadata["k y"] != "v&1" || d.EnvdVersion != EnvdVersion ||
		d.EnvdAccessToken != sb.EnvdAccessToken || d.StartedAt.IsZero() || d.CPUCount == nil || d.MemoryMB == nil || d.DiskSizeMB == nil {
		t.Fatalf("get response: %s", b)
	}
	if left := time.Until(d.EndAt); left < 100*time.Second || left > 121*time.Second {
		t.Errorf("endAt %s is not ~120 s away", d.EndAt)
	}

	// list with E2B's triple-encoded metadata filter (as the SDK sends
	// Sandbox.list({query:{metadata:{'k y':'v&1'}}})).
	st, _, b = do(t, "GET", "/v2/sandboxes?metadata=k%252520y%3Dv%2525261&state=running,paused", map[string]string{"X-API-Key": env.aKey}, nil)
	if st != http.StatusOK {
		t.Fatalf("list: %d %s", st, b)
	}
	var listed []map[string]any
	decodeJSON(t, b, &listed)
	if len(listed) != 1 || listed[0]["sandboxID"] != sb.SandboxID || listed[0]["state"] != "running" {
		t.Fatalf("metadata-filtered list: %s", b)
	}
	if _, ok := listed[0]["envdAccessToken"]; ok {
		t.Errorf("ListedSandbox carries envdAccessToken: %s", b)
	}

	// pagination: limit=1 walks both of A's sandboxes through X-Next-Token.
	var seen []string
	next := ""
	for i := 0; i < 5; i++ {
		q := "/v2/sandboxes?limit=1"
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		st, h, b := api(t, env.aKey, "GET", q, nil)
		if st != http.StatusOK {
			t.Fatalf("list page: %d %s", st, b)
		}
		var page []map[string]any
		decodeJSON(t, b, &page)
		for _, p := range page {
			seen = append(seen, p["sandboxID"].(string))
		}
		if next = h.Get("X-Next-Token"); next == "" {
			break
		}
	}
	if !slices.Contains(seen, sb.SandboxID) || !slices.Contains(seen, v1.SandboxID) || len(seen) != len(slices.Compact(slices.Clone(seen))) {
		t.Fatalf("paged list saw %v, want both %s and %s once", seen, sb.SandboxID, v1.SandboxID)
	}
	// B sees none of A's sandboxes.
	st, _, b = api(t, env.bKey, "GET", "/sandboxes", nil)
	if st != http.StatusOK || strings.Contains(string(b), sb.SandboxID) {
		t.Fatalf("B's list: %d %s", st, b)
	}
	st, _, b = api(t, env.aKey, "GET", "/v2/sandboxes?metadata=broken", nil)
	wantError(t, 400, st, b)

	// setTimeout
	st, _, b = api(t, env.aKey, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", map[string]any{"timeout": 600})
	if st != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", st, b)
	}
	got, _ := env.mgr.Get(t.Context(), sb.SandboxID)
	if left := time.Until(got.ExpiresAt); left < 590*time.Second {
		t.Errorf("after setTimeout(600) the sandbox expires in %s", left)
	}
	st, _, b = api(t, env.aKey, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", map[string]any{"timeout": 10 * 86400})
	wantError(t, 400, st, b)

	// kill, then everything about it is 404 with the JSON body.
	st, _, b = api(t, env.aKey, "DELETE", "/sandboxes/"+sb.SandboxID, nil)
	if st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, b)
	}
	st, _, b = api(t, env.aKey, "DELETE", "/sandboxes/"+sb.SandboxID, nil)
	wantError(t, 404, st, b)
	st, _, b = api(t, env.aKey, "GET", "/sandboxes/"+sb.SandboxID, nil)
	wantError(t, 404, st, b)

	// audited like the main API
	var actions []string
	for _, e := range auditActions(t, sb.SandboxID) {
		if e.PrincipalID != env.aID {
			t.Errorf("audit event %s by %q, want %s", e.Action, e.PrincipalID, env.aID)
		}
		actions = append(actions, e.Action+":"+e.Outcome)
	}
	for _, want := range []string{"e2b.sandbox.create:success", "e2b.sandbox.get:success", "e2b.sandbox.timeout:success",
		"e2b.sandbox.timeout:error", "e2b.sandbox.kill:success", "e2b.sandbox.kill:error"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit of %s lacks %s: %v", sb.SandboxID, want, actions)
		}
	}
}

func TestControlPlaneAuth(t *testing.T) {
	sb := create(t, env.aKey, nil)
	// no key, bad key, Warden key in the wrong place
	for _, key := range []string{"", "e2b_0000", "wdn_nope_nope"} {
		st, _, b := api(t, key, "GET", "/sandboxes/"+sb.SandboxID, nil)
		wantError(t, 401, st, b)
	}
	// someone else's sandbox is a 404, audited as denied
	for _, c := range []struct{ method, path string }{{"GET", ""}, {"DELETE", ""}, {"POST", "/timeout"}, {"POST", "/pause"}, {"POST", "/connect"}} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"timeout": 60}
		}
		st, _, b := api(t, env.bKey, c.method, "/sandboxes/"+sb.SandboxID+c.path, body)
		wantError(t, 404, st, b)
	}
	denied := 0
	for _, e := range auditActions(t, sb.SandboxID) {
		if e.Outcome == "denied" && e.PrincipalID == env.bID {
			denied++
		}
	}
	if denied != 5 {
		t.Errorf("%d denied audit events for B, want 5", denied)
	}
	// scopes: a read-only key can read but not create or kill, and gets no token
	st, _, b := api(t, env.readOnly, "POST", "/v2/sandboxes", map[string]any{"templateID": "base"})
	wantError(t, 403, st, b)
	st, _, b = api(t, env.readOnly, "DELETE", "/sandboxes/"+sb.SandboxID, nil)
	wantError(t, 403, st, b)
	st, _, b = api(t, env.readOnly, "GET", "/sandboxes/"+sb.SandboxID, nil)
	if st != 200 || strings.Contains(string(b), "envdAccessToken") {
		t.Fatalf("read-only get: %d %s", st, b)
	}
	// unknown template, unsupported route
	st, _, b = api(t, env.aKey, "POST", "/v2/sandboxes", map[string]any{"templateID": "no-such-template"})
	wantError(t, 400, st, b)
	st, _, b = api(t, env.aKey, "GET", "/templates", nil)
	wantError(t, 404, st, b)
	st, _, _ = do(t, "GET", "/health", nil, nil)
	if st != http.StatusNoContent {
		t.Errorf("GET /health: %d", st)
	}
}

func TestPauseConnect(t *testing.T) {
	sb := create(t, env.aKey, nil)
	path := "/sandboxes/" + sb.SandboxID
	st, _, b := api(t, env.aKey, "POST", path+"/pause", map[string]any{})
	// No skip on 501: the backend of these tests pauses (native freezes the
	// cgroup), so a refusal here is a failure.
	if st != http.StatusNoContent {
		t.Fatalf("pause: %d %s", st, b)
	}
	st, _, b = api(t, env.aKey, "POST", path+"/pause", nil)
	wantError(t, 409, st, b)
	st, _, b = api(t, env.aKey, "GET", path, nil)
	if st != 200 || !strings.Contains(string(b), `"state":"paused"`) {
		t.Fatalf("get paused: %d %s", st, b)
	}
	// traffic to a paused sandbox: 502 (isRunning() == false)
	st, _, b = envd(t, sb, "GET", "/health", nil, nil)
	if st != http.StatusBadGateway {
		t.Fatalf("health of a paused sandbox: %d %s", st, b)
	}
	st, _, b = api(t, env.aKey, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 60})
	if st != http.StatusCreated || !strings.Contains(string(b), sb.SandboxID) {
		t.Fatalf("connect to paused: %d %s", st, b)
	}
	st, _, b = api(t, env.aKey, "POST", "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 60})
	if st != http.StatusOK {
		t.Fatalf("connect to running: %d %s", st, b)
	}
	st, _, b = api(t, env.aKey, "POST", path+"/resume", map[string]any{"timeout": 60})
	wantError(t, 409, st, b)
	st, _, _ = envd(t, sb, "GET", "/health", nil, nil)
	if st != http.StatusNoContent {
		t.Fatalf("health after connect: %d", st)
	}
}

// envd sends a request through the proxy to sb's envd port with its token.
func envd(t *testing.T, sb created, method, path string, hdr map[string]string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	h := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken}
	for k, v := range hdr {
		h[k] = v
	}
	return do(t, method, path, h, body)
}

// envelope frames one Connect streaming message.
func envelope(flags byte, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}

func TestEnvdProcessStart(t *testing.T) {
	sb := create(t, env.aKey, map[string]any{"templateID": "base", "envVars": map[string]string{"GREETING": "hi"}})
	req := envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo $GREETING"]},"stdin":false}`))
	st, h, b := envd(t, sb, "POST", "/process.Process/Start", map[string]string{
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
		"Connect-Timeout-Ms": "30000", "Keepalive-Ping-Interval": "50",
	}, bytes.NewReader(req))
	if st != 200 || h.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Start: %d %s %q", st, h.Get("Content-Type"), b)
	}
	var kinds []string
	stdout := ""
	endSeen := false
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated envelope: %q", b)
		}
		flags, n := b[0], binary.BigEndian.Uint32(b[1:5])
		msg := b[5 : 5+n]
		b = b[5+n:]
		if flags&2 != 0 {
			if string(msg) != "{}" {
				t.Fatalf("end-of-stream %s", msg)
			}
			endSeen = true
			continue
		}
		var ev struct {
			Event map[string]json.RawMessage `json:"event"`
		}
		decodeJSON(t, msg, &ev)
		for k, v := range ev.Event {
			kinds = append(kinds, k)
			if k == "data" {
				var d struct{ Stdout []byte }
				decodeJSON(t, v, &d)
				stdout += string(d.Stdout)
			}
			if k == "end" && !strings.Contains(string(v), `"exited":true`) {
				t.Errorf("end event %s", v)
			}
		}
	}
	kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == "keepalive" })
	if len(kinds) < 3 || kinds[0] != "start" || kinds[len(kinds)-1] != "end" || !endSeen || stdout != "hi\n" {
		t.Fatalf("events %v, stdout %q, end-of-stream %v", kinds, stdout, endSeen)
	}
	// unary JSON: List
	st, _, b = envd(t, sb, "POST", "/process.Process/List", map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}, strings.NewReader("{}"))
	if st != 200 {
		t.Fatalf("List: %d %s", st, b)
	}
	// the call was audited, without its contents
	found := false
	for _, e := range auditActions(t, sb.SandboxID) {
		if e.Action == "e2b.envd" && strings.Contains(string(e.Detail), "/process.Process/Start") {
			found = true
			if strings.Contains(string(e.Detail), "GREETING") {
				t.Errorf("audit detail leaks the request: %s", e.Detail)
			}
		}
	}
	if !found {
		t.Errorf("no e2b.envd audit event for Start")
	}
}

func TestEnvdFiles(t *testing.T) {
	sb := create(t, env.aKey, nil)
	// files.write: multipart, the part's filename is the path
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "notes/a.txt")
	fw.Write([]byte("hello e2b"))
	mw.Close()
	st, _, b := envd(t, sb, "POST", "/files?path=notes%2Fa.txt", map[string]string{"Content-Type": mw.FormDataContentType()}, &body)
	if st != 200 || !strings.Contains(string(b), "a.txt") {
		t.Fatalf("write: %d %s", st, b)
	}
	st, _, b = envd(t, sb, "GET", "/files?path=notes%2Fa.txt", nil, nil)
	if st != 200 || string(b) != "hello e2b" {
		t.Fatalf("read: %d %q", st, b)
	}

	// signed URLs: no routing headers, no token, as downloadUrl() builds them
	exp := time.Now().Add(time.Minute).Unix()
	sig := Signature("notes/a.txt", "read", "", sb.EnvdAccessToken, exp)
	signed := fmt.Sprintf("/files?path=notes%%2Fa.txt&signature=%s&signature_expiration=%d", url.QueryEscape(sig), exp)
	st, _, b = do(t, "GET", signed, nil, nil)
	if st != 200 || string(b) != "hello e2b" {
		t.Fatalf("signed read (header-less): %d %q", st, b)
	}
	st, _, b = do(t, "GET", signed, map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983"}, nil)
	if st != 200 || string(b) != "hello e2b" {
		t.Fatalf("signed read (headers): %d %q", st, b)
	}
	// signed upload without expiration
	body.Reset()
	mw = multipart.NewWriter(&body)
	fw, _ = mw.CreateFormFile("file", "up.txt")
	fw.Write([]byte("uploaded"))
	mw.Close()
	wsig := Signature("up.txt", "write", "", sb.EnvdAccessToken, 0)
	st, _, b = do(t, "POST", "/files?path=up.txt&signature="+url.QueryEscape(wsig), map[string]string{"Content-Type": mw.FormDataContentType()}, &body)
	if st != 200 {
		t.Fatalf("signed write: %d %s", st, b)
	}
	st, _, b = envd(t, sb, "GET", "/files?path=up.txt", nil, nil)
	if st != 200 || string(b) != "uploaded" {
		t.Fatalf("read back signed upload: %d %q", st, b)
	}

	// expired signature: E2B's exact body
	old := time.Now().Add(-time.Minute).Unix()
	expired := fmt.Sprintf("/files?path=notes%%2Fa.txt&signature=%s&signature_expiration=%d",
		url.QueryEscape(Signature("notes/a.txt", "read", "", sb.EnvdAccessToken, old)), old)
	st, _, b = do(t, "GET", expired, map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983"}, nil)
	if st != 401 || strings.TrimSpace(string(b)) != `{"code":401,"message":"signature is already expired"}` {
		t.Fatalf("expired signature: %d %s", st, b)
	}
	st, _, b = do(t, "GET", expired, nil, nil) // header-less: routed by signature, then refused
	if st != 401 || !strings.Contains(string(b), "signature is already expired") {
		t.Fatalf("expired signature (header-less): %d %s", st, b)
	}
	// a signature for another op or path is invalid
	st, _, b = do(t, "GET", "/files?path=up.txt&signature="+url.QueryEscape(wsig), map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983"}, nil)
	if st != 401 || !strings.Contains(string(b), "invalid signature") {
		t.Fatalf("write signature used to read: %d %s", st, b)
	}
	st, _, b = do(t, "GET", "/files?path=up.txt", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983"}, nil)
	if st != 401 || !strings.Contains(string(b), "missing signature query parameter") {
		t.Fatalf("unsigned read: %d %s", st, b)
	}
	// a header-less /files request matching no sandbox is a 502
	st, _, b = do(t, "GET", "/files?path=x&signature=v1_bogus", nil, nil)
	if st != 502 {
		t.Fatalf("unroutable signed url: %d %s", st, b)
	}
}

func TestEnvdAuthAndRouting(t *testing.T) {
	a := create(t, env.aKey, nil)
	b := create(t, env.bKey, nil)
	connectList := map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}

	// wrong token, and no token
	for _, tok := range []string{"wrong", ""} {
		st, _, body := do(t, "POST", "/process.Process/List", map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983",
			"X-Access-Token": tok, "Content-Type": "application/json", "Connect-Protocol-Version": "1"}, strings.NewReader("{}"))
		wantError(t, 401, st, body)
	}
	st, _, body := envd(t, created{SandboxID: a.SandboxID, EnvdAccessToken: "wrong"}, "GET", "/files?path=x", nil, nil)
	if st != 401 || !strings.Contains(string(body), "access token present in header but does not match") {
		t.Fatalf("/files with a wrong token: %d %s", st, body)
	}
	// B's token does not open A's sandbox (the proxy authenticates with the
	// sandbox's own token; on the control plane A's sandbox is a 404 for B,
	// see TestControlPlaneAuth).
	st, _, body = envd(t, created{SandboxID: a.SandboxID, EnvdAccessToken: b.EnvdAccessToken}, "POST", "/process.Process/List", connectList, strings.NewReader("{}"))
	wantError(t, 401, st, body)

	// missing sandbox: 502 with E2B's body
	st, _, body = envd(t, created{SandboxID: "sb-doesnotexist", EnvdAccessToken: "x"}, "GET", "/health", nil, nil)
	if st != 502 || strings.TrimSpace(string(body)) != `{"code":502,"message":"The sandbox was not found","sandboxId":"sb-doesnotexist"}` {
		t.Fatalf("missing sandbox: %d %s", st, body)
	}
	// health without a token; internal routes refused; half the headers; other ports
	st, _, body = do(t, "GET", "/health", map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983"}, nil)
	if st != http.StatusNoContent {
		t.Fatalf("health: %d %s", st, body)
	}
	st, _, body = envd(t, a, "POST", "/init", nil, strings.NewReader(`{"envVars":{"X":"1"}}`))
	wantError(t, 404, st, body)
	st, _, _ = do(t, "GET", "/health", map[string]string{"E2b-Sandbox-Id": a.SandboxID}, nil)
	if st != 400 {
		t.Errorf("one routing header: %d, want 400", st)
	}
	st, _, body = envd(t, a, "GET", "/", map[string]string{"E2b-Sandbox-Port": "8080"}, nil)
	if st != 502 || !strings.Contains(string(body), "port is not open") {
		t.Errorf("port 8080: %d %s", st, body)
	}
	// code interpreter port: token required, envd routes not reachable
	ci := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999"}
	st, _, _ = do(t, "GET", "/contexts", ci, nil)
	if st != 403 {
		t.Errorf("contexts without a token: %d, want 403", st)
	}
	ci["E2b-Traffic-Access-Token"] = *a.TrafficAccessToken
	st, _, body = do(t, "GET", "/contexts", ci, nil)
	if st != 200 {
		t.Errorf("contexts with the traffic token: %d %s", st, body)
	}
	ci["X-Access-Token"] = a.EnvdAccessToken
	st, _, _ = do(t, "POST", "/process.Process/List", ci, strings.NewReader("{}"))
	if st != 404 {
		t.Errorf("envd route on the code-interpreter port: %d, want 404", st)
	}

	// envd traffic to a killed sandbox: 502
	st, _, _ = api(t, env.bKey, "DELETE", "/sandboxes/"+b.SandboxID, nil)
	if st != 204 {
		t.Fatalf("kill b: %d", st)
	}
	st, _, body = envd(t, b, "GET", "/health", nil, nil)
	if st != 502 || !strings.Contains(string(body), "The sandbox was not found") {
		t.Fatalf("killed sandbox: %d %s", st, body)
	}
}

// TestHostRouting: with a domain configured, {port}-{id}.{domain} reaches the
// sandbox without routing headers, and create answers with the domain.
func TestHostRouting(t *testing.T) {
	srv, err := New(Config{Manager: env.mgr, Auth: auth.New(env.st), Audit: env.audit,
		TokenKey: []byte("test e2b token key, 32 bytes..."), Domain: "sbx.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	req, _ := http.NewRequest("POST", hs.URL+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":60}`))
	req.Header.Set("X-API-Key", env.aKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		SandboxID       string  `json:"sandboxID"`
		EnvdAccessToken string  `json:"envdAccessToken"`
		Domain          *string `json:"domain"`
	}
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != 201 || c.Domain == nil || *c.Domain != "sbx.example.test" {
		t.Fatalf("create: %d, domain %v", resp.StatusCode, c.Domain)
	}
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+c.SandboxID, nil)
	get := func(host, path, token string) (int, string) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		req.Host = host
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("49983-"+c.SandboxID+".sbx.example.test", "/health", ""); st != http.StatusNoContent {
		t.Errorf("health by host: %d %s", st, body)
	}
	if st, body := get("49983-"+c.SandboxID+".SBX.example.test:443", "/envs", c.EnvdAccessToken); st != 200 || !strings.HasPrefix(body, "{") {
		t.Errorf("envs by host (mixed case, with port): %d %s", st, body)
	}
	if st, _ := get("49983-"+c.SandboxID+".sbx.example.test", "/envs", "wrong"); st != 401 {
		t.Errorf("wrong token by host: %d, want 401", st)
	}
	if st, body := get("49983-sb-nope.sbx.example.test", "/health", ""); st != 502 || !strings.Contains(body, "sb-nope") {
		t.Errorf("unknown sandbox by host: %d %s", st, body)
	}
	if st, _ := get("8080-"+c.SandboxID+".sbx.example.test", "/", ""); st != 403 {
		t.Errorf("user port by host without a token: %d, want 403", st)
	}
	if st, body := get("8080-"+c.SandboxID+".sbx.example.test", "/", c.EnvdAccessToken); st != 502 || !strings.Contains(body, "port is not open") {
		t.Errorf("closed port by host: %d %s", st, body)
	}
	// A host of another domain is the control plane, not sandbox traffic.
	if st, body := get("49983-"+c.SandboxID+".other.test", "/envs", c.EnvdAccessToken); st == 200 {
		t.Errorf("a foreign domain was routed to the sandbox: %d %s", st, body)
	}
}

// TestSignedLookupBounded: header-less signed URLs are found by scanning
// running sandboxes; a found signature is remembered, and scans beyond the
// daemon-wide rate get 429 instead of costing a scan each.
func TestSignedLookupBounded(t *testing.T) {
	srv, err := New(Config{Manager: env.mgr, Auth: auth.New(env.st), Audit: env.audit,
		TokenKey: []byte("test e2b token key, 32 bytes...")})
	if err != nil {
		t.Fatal(err)
	}
	srv.scans = rate.NewLimiter(rate.Every(time.Hour), 1) // one scan, then none
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	sb := create(t, env.aKey, nil)
	token := srv.EnvdToken(stored(t, sb.SandboxID))
	get := func(path string) int {
		resp, err := http.Get(hs.URL + "/files?path=" + url.QueryEscape(path) + "&signature=" + url.QueryEscape(Signature(path, "read", "", token, 0)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get("/etc/hostname"); st != 200 {
		t.Fatalf("first signed read: %d", st)
	}
	for i := 0; i < 3; i++ {
		if st := get("/etc/hostname"); st != 200 {
			t.Fatalf("repeated signed read (remembered, no scan): %d", st)
		}
	}
	if st := get("/etc/hosts"); st != http.StatusTooManyRequests {
		t.Fatalf("a new signature past the scan budget: %d, want 429", st)
	}
}

// TestMetrics: the control plane's getMetrics and envd's /metrics report the
// sandbox's cgroup: memory in use, and CPU in percent of its cores, which a
// busy loop drives up.
func TestMetrics(t *testing.T) {
	sb := create(t, env.aKey, map[string]any{"templateID": "base", "timeout": 60})
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+sb.SandboxID, nil)
	st, _, _ := api(t, env.aKey, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", nil) // first reading
	if st != 200 {
		t.Fatalf("metrics: %d", st)
	}
	c, err := env.mgr.Agent(t.Context(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Run(t.Context(), agentclient.Cmd{Args: []string{"timeout", "0.5", "sh", "-c", "while :; do :; done"}}); err != nil || res.ExitCode != 124 {
		t.Fatalf("busy loop: %+v %v", res, err)
	}
	st, _, body := api(t, env.aKey, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", nil)
	var ms []struct {
		CPUCount   int     `json:"cpuCount"`
		CPUUsedPct float64 `json:"cpuUsedPct"`
		MemUsed    int64   `json:"memUsed"`
		MemTotal   int64   `json:"memTotal"`
	}
	if err := json.Unmarshal(body, &ms); err != nil || st != 200 || len(ms) != 1 {
		t.Fatalf("metrics: %d %s", st, body)
	}
	if m := ms[0]; m.CPUUsedPct < 5 || m.CPUUsedPct > 100 || m.MemUsed <= 0 || m.MemTotal != 512<<20 || m.CPUCount != 1 {
		t.Errorf("metrics after half a second of a busy core: %+v", m)
	}
	st, _, body = envd(t, sb, "GET", "/metrics", nil, nil)
	var em map[string]float64
	if err := json.Unmarshal(body, &em); err != nil || st != 200 || em["cpu_count"] != 1 || em["mem_used"] <= 0 || em["mem_total_mib"] != 512 {
		t.Errorf("envd /metrics: %d %s", st, body)
	}
}

// TestUserPorts: getHost(port) traffic reaches a server in the sandbox
// through the agent; it needs the traffic token unless the sandbox was
// created with allowPublicTraffic.
func TestUserPorts(t *testing.T) {
	serve := func(sb created) {
		t.Helper()
		c, err := env.mgr.Agent(t.Context(), sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		stream, err := c.Start(context.Background(), agentclient.Cmd{Args: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}, Dir: "/etc"})
		if err != nil {
			t.Fatal(err)
		}
		go func() { // drain until the sandbox ends
			for stream.Receive() {
			}
			stream.Close()
		}()
		for i := 0; i < 100; i++ {
			if c.CheckPort(t.Context(), 8000) == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("http.server did not start")
	}
	sb := create(t, env.aKey, nil)
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+sb.SandboxID, nil)
	serve(sb)
	route := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "8000"}
	st, _, body := do(t, "GET", "/", route, nil)
	if st != 403 || !strings.Contains(string(body), "traffic access token") {
		t.Errorf("user port without a token: %d %s", st, body)
	}
	route["E2b-Traffic-Access-Token"] = *sb.TrafficAccessToken
	st, _, body = do(t, "GET", "/", route, nil)
	if st != 200 || !strings.Contains(string(body), "hostname") {
		t.Errorf("user port with the traffic token: %d %.200s", st, body)
	}
	route["E2b-Sandbox-Port"] = "8001"
	st, _, body = do(t, "GET", "/", route, nil)
	if st != 502 || !strings.Contains(string(body), "port is not open") {
		t.Errorf("closed user port: %d %s", st, body)
	}

	pub := create(t, env.aKey, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": true}})
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+pub.SandboxID, nil)
	serve(pub)
	st, _, body = do(t, "GET", "/", map[string]string{"E2b-Sandbox-Id": pub.SandboxID, "E2b-Sandbox-Port": "8000"}, nil)
	if st != 200 || !strings.Contains(string(body), "hostname") {
		t.Errorf("public user port without a token: %d %.200s", st, body)
	}
}

// TestNetworkOptions: E2B's network options map onto Warden policies.
func TestNetworkOptions(t *testing.T) {
	needsRealSandbox(t)
	policyOf := func(id string) string {
		sb, err := env.mgr.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return string(sb.Network)
	}
	open := create(t, env.aKey, map[string]any{"templateID": "base", "allow_internet_access": true})
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+open.SandboxID, nil)
	if got := policyOf(open.SandboxID); !strings.Contains(got, `"mode":"open"`) {
		t.Errorf("allow_internet_access true: %s", got)
	}
	closed := create(t, env.aKey, map[string]any{"templateID": "base", "allow_internet_access": false})
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+closed.SandboxID, nil)
	if got := policyOf(closed.SandboxID); got != "" && !strings.Contains(got, `"mode":"none"`) {
		t.Errorf("allow_internet_access false: %s", got)
	}
	list := create(t, env.aKey, map[string]any{"templateID": "base", "network": map[string]any{
		"allowOut": []string{"pypi.org", "*.github.com", "203.0.113.7", "198.51.100.0/24"}, "denyOut": []string{"0.0.0.0/0"}}})
	defer api(t, env.aKey, "DELETE", "/sandboxes/"+list.SandboxID, nil)
	got := policyOf(list.SandboxID)
	for _, want := range []string{`"mode":"allowlist"`, `"host":"pypi.org"`, `"host":"*.github.com"`, `"cidr":"203.0.113.7/32"`, `"cidr":"198.51.100.0/24"`} {
		if !strings.Contains(got, want) {
			t.Errorf("allowOut policy %s lacks %s", got, want)
		}
	}
	st, _, body := api(t, env.aKey, "POST", "/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{"denyOut": []string{"10.0.0.0/8"}}})
	if st != 400 || !strings.Contains(string(body), "denyOut") {
		t.Errorf("denyOut alone: %d %s", st, body)
	}
}

// stored returns the sandbox's record.
func stored(t *testing.T, id string) store.Sandbox {
	t.Helper()
	sb, err := env.mgr.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}
