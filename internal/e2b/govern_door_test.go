package e2b

// The E2B door of the governed path: decoding of what the proxy forwards
// (Connect envelopes, /files, /execute), the route-kind table, and a
// governed server refusing actions in each route's form.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	filesystem "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
	process "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
)

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// sdkStart is a StartRequest as the JS SDK sends it: /bin/bash -l -c <cmd>.
func sdkStart(cmd string) *process.StartRequest {
	cwd := "/tmp"
	return &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd},
		Envs: map[string]string{"B": "2", "A": "1"}, Cwd: &cwd}}
}

func TestDecodeConnectStart(t *testing.T) {
	want := sdkStart("git push --force")
	js, _ := protojson.Marshal(want)
	pb, _ := proto.Marshal(want)
	for _, tc := range []struct {
		name, ct, enc string
		body          []byte
	}{
		{"json", "application/connect+json", "", envelope(0, js)},
		{"proto", "application/connect+proto", "", envelope(0, pb)},
		{"json gzip", "application/connect+json; charset=utf-8", "gzip", envelope(1, gz(js))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got process.StartRequest
			if err := decodeConnect(tc.ct, tc.enc, true, tc.body, &got); err != nil {
				t.Fatal(err)
			}
			a := describeMessage(&got, "root")
			if a.Kind != govern.KindExec || a.Exec.Shell != "git push --force" || a.Exec.Argv != "/bin/bash -l -c git push --force" ||
				a.Exec.Cwd != "/tmp" || a.Exec.User != "root" || strings.Join(a.Exec.EnvKeys, ",") != "A,B" {
				t.Fatalf("action %+v exec %+v", a, a.Exec)
			}
		})
	}
	// A PTY start is a pty action.
	pty := sdkStart("bash")
	pty.Pty = &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}
	if a := describeMessage(pty, ""); a.Kind != govern.KindPTY {
		t.Fatalf("pty start is %s", a.Kind)
	}
}

func TestDecodeConnectRefusesWhatItCannotRead(t *testing.T) {
	js, _ := protojson.Marshal(sdkStart("x"))
	for _, tc := range []struct {
		name, ct, enc string
		body          []byte
	}{
		{"grpc-web", "application/grpc-web+proto", "", envelope(0, js)},
		{"unary type on a stream", "application/json", "", js},
		{"two messages", "application/connect+json", "", append(envelope(0, js), envelope(0, js)...)},
		{"end-stream flag", "application/connect+json", "", envelope(2, js)},
		{"short", "application/connect+json", "", []byte{0, 0}},
		{"length past the end", "application/connect+json", "", envelope(0, js)[:8]},
		{"unknown compression", "application/connect+json", "br", envelope(1, js)},
		{"not json", "application/connect+json", "", envelope(0, []byte("{"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeConnect(tc.ct, tc.enc, true, tc.body, &process.StartRequest{})
			var ue *errUngovernable
			if !errors.As(err, &ue) {
				t.Fatalf("err %v, want a refusal", err)
			}
		})
	}
}

func TestDescribeFilesystem(t *testing.T) {
	for _, tc := range []struct {
		msg              proto.Message
		user             string
		kind             govern.Kind
		op, path, destin string
	}{
		{&filesystem.MoveRequest{Source: "a.txt", Destination: "/etc/../etc/passwd"}, "", govern.KindFileWrite, "move", "/home/user/a.txt", "/etc/passwd"},
		{&filesystem.MakeDirRequest{Path: "~/d"}, "root", govern.KindFileWrite, "mkdir", "/root/d", ""},
		{&filesystem.RemoveRequest{Path: "/x/../y"}, "", govern.KindFileRemove, "remove", "/y", ""},
		{&filesystem.StatRequest{Path: "../../etc/shadow"}, "user", govern.KindFileRead, "stat", "/etc/shadow", ""},
		{&filesystem.ListDirRequest{Path: ""}, "", govern.KindFileRead, "list", "/home/user", ""},
		{&filesystem.WatchDirRequest{Path: "/w"}, "", govern.KindFileRead, "watch", "/w", ""},
	} {
		js, _ := protojson.Marshal(tc.msg)
		msg := tc.msg.ProtoReflect().New().Interface()
		if err := decodeConnect("application/json", "", false, js, msg); err != nil {
			t.Fatal(err)
		}
		a := describeMessage(msg, tc.user)
		if a.Kind != tc.kind || a.File.Op != tc.op || a.File.Path != tc.path || a.File.Dest != tc.destin {
			t.Errorf("%T: %s %+v", tc.msg, a.Kind, a.File)
		}
	}
}

func TestDescribeMultipartUpload(t *testing.T) {
	body := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/etc/x\"\r\n\r\nabc\r\n" +
		"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"notes/a.txt\"\r\n\r\nhello\r\n--B--\r\n"
	r := httptest.NewRequest("POST", "/files", strings.NewReader(body))
	r.Header.Set("Content-Type", "multipart/form-data; boundary=B")
	acts, _, err := describeFiles(r, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 2 || acts[0].File.Path != "/etc/x" || acts[0].File.Size != 3 || acts[1].File.Path != "/home/user/notes/a.txt" {
		t.Fatalf("actions %+v %+v", acts[0].File, acts[1].File)
	}
	var fwd bytes.Buffer
	fwd.ReadFrom(r.Body)
	if fwd.String() != body || r.ContentLength != int64(len(body)) {
		t.Fatalf("forwarded %q (length %d), want the same bytes", fwd.String(), r.ContentLength)
	}
}

func TestDescribeExecuteForwardsTheSameBytes(t *testing.T) {
	body := `{"code":"import os\nos.system('x')","language":"python","context_id":"c1"}`
	r := httptest.NewRequest("POST", "/execute", strings.NewReader(body))
	acts, err := describeCode(r, "/execute")
	if err != nil || len(acts) != 1 || acts[0].Kind != govern.KindCodeRun || acts[0].Code.Code != "import os\nos.system('x')" {
		t.Fatalf("%v %+v", err, acts)
	}
	var fwd bytes.Buffer
	fwd.ReadFrom(r.Body)
	if fwd.String() != body {
		t.Fatalf("forwarded %q", fwd.String())
	}
	big := httptest.NewRequest("POST", "/execute", strings.NewReader(`{"code":"`+strings.Repeat("x", maxGovernedBody)+`"}`))
	if _, err := describeCode(big, "/execute"); err == nil {
		t.Fatal("a body over the bound was described")
	}
}

// TestProxyRoutesHaveKinds: every route the proxy forwards is governed as
// a kind, or says why it is none.
func TestProxyRoutesHaveKinds(t *testing.T) {
	routes := []string{"/files", "/health", "/metrics", "/envs", "/execute", "/contexts", "/contexts/{id}", "/contexts/{id}/...", "code:/health"}
	for p := range rpcProcedures {
		routes = append(routes, p)
	}
	for _, p := range routes {
		k, ok := proxyKinds[p]
		if !ok || k == "" {
			t.Errorf("forwarded route %s has no kind in proxyKinds", p)
		}
	}
	for p := range rpcProcedures {
		if !strings.HasPrefix(proxyKinds[p], "-") {
			if _, err := describeRPC(httptest.NewRequest("GET", p, nil), p, ""); err == nil {
				t.Errorf("%s is governed but describeRPC does not describe it", p)
			}
		}
	}
}

func FuzzDecodeConnect(f *testing.F) {
	js, _ := protojson.Marshal(sdkStart("git push --force"))
	pb, _ := proto.Marshal(sdkStart("echo ok"))
	f.Add("application/connect+json", "", envelope(0, js))
	f.Add("application/connect+proto", "", envelope(0, pb))
	f.Add("application/connect+json", "gzip", envelope(1, gz(js)))
	f.Add("application/json", "", js)
	f.Add("application/proto", "gzip", gz(pb))
	f.Add("application/connect+json", "", []byte{0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, ct, enc string, body []byte) {
		for _, streaming := range []bool{true, false} {
			var m process.StartRequest
			err := decodeConnect(ct, enc, streaming, body, &m)
			if err != nil {
				var ue *errUngovernable
				if !errors.As(err, &ue) {
					t.Fatalf("error %v is not a refusal", err)
				}
				continue
			}
			a := describeMessage(&m, "")
			if a == nil || a.Exec == nil || !strings.HasPrefix(a.Exec.Argv, m.GetProcess().GetCmd()) {
				t.Fatalf("decoded %v described as %+v", &m, a)
			}
			for _, f := range []proto.Message{&filesystem.MoveRequest{}, &filesystem.StatRequest{}} {
				if decodeConnect(ct, enc, streaming, body, f) == nil {
					if a := describeMessage(f, "u"); a == nil || !strings.HasPrefix(a.File.Path, "/") {
						t.Fatalf("file action %+v", a)
					}
				}
			}
		}
	})
}

// governedServer is an E2B server over the test stack with an engine
// holding policy.
func governedServer(t *testing.T, p govern.Policy) *httptest.Server {
	t.Helper()
	eng := govern.New(govern.Config{})
	if _, err := eng.CreatePolicy(context.Background(), p, "test"); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Manager: env.mgr, Auth: auth.New(env.st), Audit: env.audit,
		TokenKey: []byte("test e2b token key, 32 bytes..."), Govern: eng})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

var doorPolicy = govern.Policy{ID: "e2b-door", Scope: govern.Scope{Kind: govern.ScopeInstallation}, Rules: []govern.Rule{
	{ID: "no-force-push", Kinds: []govern.Kind{govern.KindExec, govern.KindPTY}, Outcome: govern.Deny,
		When: `exec.argv.matches("\\bgit\\s+push\\b.*\\s(-f|--force)\\b")`, Message: "force pushes are not allowed"},
	{ID: "no-etc-writes", Kinds: []govern.Kind{govern.KindFileWrite, govern.KindFileRemove}, Outcome: govern.Deny,
		When: `file.path.startsWith("/etc/") || file.dest.startsWith("/etc/")`, Message: "nothing is written under /etc"},
	{ID: "no-r", Kinds: []govern.Kind{govern.KindCodeRun}, Outcome: govern.Deny, When: `code.language == "r"`, Message: "no R here"},
	{ID: "no-secret-template", Kinds: []govern.Kind{govern.KindSandboxCreate}, Outcome: govern.Deny,
		When: `create.template == "secret-tmpl"`, Message: "that template is not for agents"},
}}

func TestE2BDoorGoverned(t *testing.T) {
	hs := governedServer(t, doorPolicy)
	call := func(method, path string, hdr map[string]string, body []byte) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, bytes.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Header, b.Bytes()
	}
	st, _, b := call("POST", "/v2/sandboxes", map[string]string{"X-API-Key": env.aKey}, []byte(`{"templateID":"secret-tmpl"}`))
	if st != 403 || !strings.Contains(string(b), "denied by policy: that template is not for agents") {
		t.Fatalf("create of a denied template: %d %s", st, b)
	}
	st, _, b = call("POST", "/v2/sandboxes", map[string]string{"X-API-Key": env.aKey}, []byte(`{"templateID":"base","timeout":120}`))
	if st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	var sb created
	decodeJSON(t, b, &sb)
	t.Cleanup(func() { env.mgr.Kill(context.Background(), sb.SandboxID, "test cleanup") })
	envd := func(port string) map[string]string {
		return map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": port, "X-Access-Token": sb.EnvdAccessToken,
			"Authorization": "Basic dXNlcjo="}
	}

	// process.Process/Start (server-streaming): the end-stream envelope.
	js, _ := protojson.Marshal(sdkStart("git push --force origin main"))
	h := envd("49983")
	h["Content-Type"] = "application/connect+json"
	st, hdr, b := call("POST", processpbconnect.ProcessStartProcedure, h, envelope(0, js))
	if st != 200 || len(b) < 5 || b[0] != 2 || hdr.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("denied start: %d %q %q", st, hdr.Get("Content-Type"), b)
	}
	var end struct {
		Error struct{ Code, Message string }
	}
	decodeJSON(t, b[5:], &end)
	if end.Error.Code != "permission_denied" || end.Error.Message != "denied by policy: force pushes are not allowed" {
		t.Fatalf("end-stream %s", b[5:])
	}
	// An allowed command is forwarded, undisturbed by the decoding.
	js, _ = protojson.Marshal(sdkStart("echo ok"))
	st, _, b = call("POST", processpbconnect.ProcessStartProcedure, h, envelope(0, js))
	if st != 200 || len(b) < 5 || b[0] == 2 {
		t.Fatalf("allowed start: %d %q", st, b)
	}

	// filesystem.Filesystem/Move (unary): 403 with Connect's error JSON.
	h = envd("49983")
	h["Content-Type"] = "application/json"
	mv, _ := protojson.Marshal(&filesystem.MoveRequest{Source: "/tmp/a", Destination: "/etc/a"})
	st, _, b = call("POST", filesystempbconnect.FilesystemMoveProcedure, h, mv)
	if st != 403 || !strings.Contains(string(b), `"code":"permission_denied"`) || !strings.Contains(string(b), "nothing is written under /etc") {
		t.Fatalf("denied move: %d %s", st, b)
	}

	// /files: E2B's error JSON, 403.
	h = envd("49983")
	h["Content-Type"] = "application/octet-stream"
	st, _, b = call("POST", "/files?path=/etc/x", h, []byte("x"))
	wantError(t, 403, st, b)
	if !strings.Contains(string(b), "nothing is written under /etc") {
		t.Fatalf("denied write: %s", b)
	}

	// One audit event per action, naming the rule.
	var rules []string
	for _, ev := range auditActions(t, sb.SandboxID) {
		var d map[string]json.RawMessage
		json.Unmarshal(ev.Detail, &d)
		var rec govern.AuditRecord
		if raw, ok := d[govern.AuditKey]; ok && json.Unmarshal(raw, &rec) == nil && rec.Decision.RuleID != "" {
			if ev.Outcome != "denied" || rec.Action.Surface != govern.SurfaceE2B || rec.Decision.PolicyVersion != 1 {
				t.Errorf("event %+v record %+v", ev, rec.Decision)
			}
			rules = append(rules, rec.Decision.RuleID)
		}
	}
	if strings.Join(rules, ",") != "no-force-push,no-etc-writes,no-etc-writes" {
		t.Errorf("audited rules %v", rules)
	}
}
