package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// The guard at every door (docs/guardrails.md), through the real daemon:
// at the E2B door a secret in a process's command line or environment is
// refused before the process starts, and an upload (multipart, or a raw
// gzip-encoded body) holding a secret is refused with nothing written,
// while one holding a card number is written masked; at the native door
// the same holds for presigned uploads and archive uploads. The audit log
// records the findings (detector, kind), never the values.
func TestGuardDoorsDaemon(t *testing.T) {
	d := startE2BDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := d.client(t, d.adminKey)
	for _, p := range []warden.PolicyWrite{
		{ID: "guard-secrets", Scope: warden.PolicyScope{Kind: "installation"},
			Guard: &warden.PolicyGuard{Detectors: []string{"secrets"}, Targets: []string{"exec", "file.write"}, Action: "block"}},
		{ID: "guard-pii", Scope: warden.PolicyScope{Kind: "installation"},
			Guard: &warden.PolicyGuard{Detectors: []string{"pii"}, Targets: []string{"file.write"}, Action: "mask"}},
	} {
		if _, err := admin.CreatePolicy(ctx, p); err != nil {
			t.Fatalf("policy %s: %v", p.ID, err)
		}
	}
	sb := d.e2bCreate(t, d.adminKey)
	id := sb.SandboxID
	digits := strings.ReplaceAll(guardCard, " ", "")
	noSecret := func(what string, b []byte) {
		t.Helper()
		for _, v := range []string{guardAWSKey, guardGHTok, guardCard, digits} {
			if bytes.Contains(b, []byte(v)) {
				t.Fatalf("%s holds %q: %s", what, v, b)
			}
		}
	}
	absent := func(p string) {
		t.Helper()
		if _, err := admin.Stat(ctx, id, p); err == nil {
			t.Fatalf("%s was written", p)
		}
	}
	content := func(p string) string {
		t.Helper()
		rc, err := admin.ReadFile(ctx, id, p, warden.ReadOptions{})
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	masked := func(p, want string) {
		t.Helper()
		got := content(p)
		noSecret(p, []byte(got))
		if !strings.Contains(got, "[REDACTED:credit_card]") || !strings.Contains(got, want) {
			t.Fatalf("%s: %q, want it masked and holding %q", p, got, want)
		}
	}

	// E2B door: process start (Connect, server-streaming, JSON).
	start := func(cmd string, env map[string]string) (int, []byte) {
		msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}, "envs": env}})
		body := make([]byte, 5, 5+len(msg))
		binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
		body = append(body, msg...)
		h := envdHeaders(id, sb.EnvdAccessToken)
		h.Set("Content-Type", "application/connect+json")
		h.Set("Connect-Protocol-Version", "1")
		return e2bCall(t, "POST", d.e2b+"/process.Process/Start", h, bytes.NewReader(body))
	}
	for name, tc := range map[string]struct {
		cmd string
		env map[string]string
	}{
		"secret in the command": {"echo " + guardAWSKey + " > /tmp/leak-cmd", nil},
		"secret in the env":     {"echo $TOKEN > /tmp/leak-env", map[string]string{"TOKEN": guardGHTok}},
	} {
		st, b := start(tc.cmd, tc.env)
		if st != http.StatusOK || !bytes.Contains(b, []byte("permission_denied")) || !bytes.Contains(b, []byte("secrets detector")) {
			t.Fatalf("%s: %d %s, want a permission_denied end-stream naming the detector", name, st, b)
		}
		noSecret(name+": the refusal", b)
	}
	absent("/tmp/leak-cmd")
	absent("/tmp/leak-env")
	if st, b := start("echo fine", map[string]string{"A": "1"}); st != http.StatusOK || bytes.Contains(b, []byte("permission_denied")) {
		t.Fatalf("a clean start: %d %s", st, b)
	}

	// E2B door: uploads.
	upload := func(q, ct, enc string, body []byte) (int, []byte) {
		h := envdHeaders(id, sb.EnvdAccessToken)
		h.Set("Content-Type", ct)
		if enc != "" {
			h.Set("Content-Encoding", enc)
		}
		return e2bCall(t, "POST", d.e2b+"/files"+q, h, bytes.NewReader(body))
	}
	ct, mp := multipartFile(t, "/tmp/e2b-secret.txt", "deploy key "+guardAWSKey+"\n")
	if st, b := upload("", ct, "", mp.Bytes()); st != http.StatusForbidden || !bytes.Contains(b, []byte("secrets")) {
		t.Fatalf("multipart upload of a secret: %d %s", st, b)
	} else {
		noSecret("the refusal", b)
	}
	absent("/tmp/e2b-secret.txt")
	ct, mp = multipartFile(t, "ignored", "card "+guardCard+" on file\n")
	if st, b := upload("?path=/tmp/e2b-card.txt", ct, "", mp.Bytes()); st != http.StatusOK {
		t.Fatalf("multipart upload of a card: %d %s", st, b)
	}
	masked("/tmp/e2b-card.txt", " on file")
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(`{"token": "` + guardGHTok + `"}`))
	zw.Close()
	if st, b := upload("?path=/tmp/e2b-raw.json", "application/octet-stream", "gzip", zb.Bytes()); st != http.StatusForbidden {
		t.Fatalf("gzip upload of a secret: %d %s", st, b)
	}
	absent("/tmp/e2b-raw.json")
	ct, mp = multipartFile(t, "/tmp/e2b-plain.txt", "nothing to see\n")
	if st, b := upload("", ct, "", mp.Bytes()); st != http.StatusOK || content("/tmp/e2b-plain.txt") != "nothing to see\n" {
		t.Fatalf("a clean upload: %d %s", st, b)
	}

	// Native door: presigned uploads.
	presignPut := func(p, body string) (int, []byte) {
		u, err := admin.Presign(ctx, id, warden.PresignRequest{Path: p, Op: "write"})
		if err != nil {
			t.Fatal(err)
		}
		return e2bCall(t, "PUT", u.URL, nil, strings.NewReader(body))
	}
	if st, b := presignPut("/tmp/pre-secret.txt", "AWS_ACCESS_KEY_ID="+guardAWSKey+"\n"); st != http.StatusForbidden {
		t.Fatalf("presigned upload of a secret: %d %s", st, b)
	} else {
		noSecret("the refusal", b)
	}
	absent("/tmp/pre-secret.txt")
	// Keyless callers' events are bounded to one a second per action and
	// sandbox (the next one counts those left out): wait, so the audit
	// check below finds this upload's own event.
	time.Sleep(1100 * time.Millisecond)
	if st, b := presignPut("/tmp/pre-card.txt", "pay with "+guardCard+" today"); st != http.StatusOK {
		t.Fatalf("presigned upload of a card: %d %s", st, b)
	}
	masked("/tmp/pre-card.txt", " today")

	// Native door: archive uploads (each file of the tar is screened).
	tarOf := func(files map[string]string) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for name, body := range files {
			tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
			tw.Write([]byte(body))
		}
		tw.Close()
		return &b
	}
	err := admin.UploadArchive(ctx, id, "/tmp/arc1", tarOf(map[string]string{"ok.txt": "fine\n", "sub/key.txt": "key " + guardGHTok}))
	if err == nil || !strings.Contains(err.Error(), "secrets") {
		t.Fatalf("archive upload with a secret: %v", err)
	}
	noSecret("the refusal", []byte(err.Error()))
	absent("/tmp/arc1/sub/key.txt")
	absent("/tmp/arc1/ok.txt")
	if err := admin.UploadArchive(ctx, id, "/tmp/arc2", tarOf(map[string]string{"ok.txt": "fine\n", "card.txt": "card " + guardCard + " end"})); err != nil {
		t.Fatalf("archive upload with a card: %v", err)
	}
	masked("/tmp/arc2/card.txt", " end")
	if got := content("/tmp/arc2/ok.txt"); got != "fine\n" {
		t.Fatalf("ok.txt: %q", got)
	}

	// Middleware through the API and the CLI (admin scope): added, it runs
	// at the E2B door at once; listed with its source; tested on a sample
	// action; removed, it no longer runs.
	script := `function pre(a) { return a.exec.cmd === "curl" || / curl /.test(a.exec.argv) ? {block: "no curl"} : {allow: true}; }`
	if out, errOut, code := d.cli(t, script, "middleware", "add", "no-curl", "--kinds", "exec,pty", "--script", "-"); code != 0 {
		t.Fatalf("middleware add: %d %s %s", code, out, errOut)
	}
	if st, b := start("curl https://example.com", nil); !bytes.Contains(b, []byte("blocked by middleware no-curl: no curl")) {
		t.Fatalf("start through the added middleware: %d %s", st, b)
	}
	if out, _, code := d.cli(t, "", "middleware", "ls"); code != 0 || !strings.Contains(out, "no-curl") || !strings.Contains(out, "exec,pty") || !strings.Contains(out, "api") {
		t.Fatalf("middleware ls: %d %s", code, out)
	}
	if out, errOut, code := d.cli(t, `{"kind":"exec","exec":{"cmd":"curl","argv":"curl x"}}`, "middleware", "test", "no-curl", "--action", "-"); code != 0 || strings.TrimSpace(out) != "block: no curl" {
		t.Fatalf("middleware test: %d %q %s", code, out, errOut)
	}
	v, err := admin.TestMiddleware(ctx, warden.MiddlewareTestRequest{
		Middleware: &warden.Middleware{Kinds: []string{"exec"}, Script: `function pre(a) { return {modify: ["echo", "safe"]}; }`},
		Action:     json.RawMessage(`{"kind":"exec","exec":{"cmd":"rm","argv":"rm -rf /"}}`)})
	if err != nil || v.Action != "modify" || string(v.Modified) != `["echo","safe"]` {
		t.Fatalf("test a draft: %+v %v", v, err)
	}
	if _, errOut, code := d.cli(t, "", "middleware", "rm", "no-curl"); code != 0 {
		t.Fatalf("middleware rm: %d %s", code, errOut)
	}
	if st, b := start("curl https://example.com", nil); bytes.Contains(b, []byte("permission_denied")) {
		t.Fatalf("start after the middleware was removed: %d %s", st, b)
	}
	if list, err := admin.ListMiddleware(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after rm: %+v %v", list, err)
	}

	// warden guard eval: the secrets detector on the committed copy of the
	// corpus's secrets file (gzip), dev split, through the daemon.
	out, errOut, code := d.cli(t, "", "guard", "eval", "--json", "--data", "../../internal/guard/eval/testdata/secrets.jsonl.gz",
		"--split", "dev", "--detectors", "secrets")
	var rep warden.GuardEvalReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Groups) != 1 {
		t.Fatalf("guard eval: %d %s %s", code, out, errOut)
	}
	if g := rep.Groups[0]; rep.Rows < 1000 || g.Detector != "secrets" || g.Label != "secret" || g.Recall < 0.98 || g.Precision < 0.95 ||
		rep.Confusion["secret"]["secret"] != g.TP || rep.P50PerKiBUS <= 0 {
		t.Fatalf("guard eval: %+v", rep)
	}
	out, _, code = d.cli(t, `{"text":"key `+guardAWSKey+`","label":"secret"}
{"text":"hello there","label":"none"}
`, "guard", "eval", "--data", "-", "--detectors", "secrets,pii")
	if code != 0 || !strings.Contains(out, "2 rows") || !strings.Contains(out, "confusion") || !strings.Contains(out, "time per KiB") {
		t.Fatalf("guard eval table: %d %s", code, out)
	}
	noSecret("guard eval", []byte(out))

	// The audit log records the findings, never the values.
	page, err := admin.ListAudit(ctx, warden.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(page.Events)
	noSecret("the audit log", all)
	found := map[string]bool{}
	for _, e := range page.Events {
		b, _ := json.Marshal(e.Detail)
		s := string(b)
		for _, k := range []string{"aws-access-token", "github-pat", "credit_card"} {
			if strings.Contains(s, `"kind":"`+k+`"`) {
				found[e.Action+" "+k+" "+e.Outcome] = true
			}
		}
	}
	for _, want := range []string{"e2b.envd aws-access-token denied", "e2b.envd github-pat denied", "e2b.envd credit_card success",
		"file.presigned_write aws-access-token denied", "file.presigned_write credit_card success",
		"archive.upload github-pat denied", "archive.upload credit_card success"} {
		if !found[want] {
			t.Errorf("no audit event %q; have %v", want, found)
		}
	}
}
