package api

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestAudit checks that calls leave one audit event each, with principal,
// target, outcome, request ID and a detail without secrets, and that the
// chain verifies.
func TestAudit(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 60*time.Second)
	a, id := env.a, env.sbA
	admin := env.admin
	dir := "/tmp/audit-dir-" + uniq()

	start, err := admin.ListAudit(ctx, warden.AuditQuery{After: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	// Find the current end of the log.
	var after int64
	for ev, err := range admin.AllAuditEvents(ctx, warden.AuditQuery{Limit: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		after = ev.Seq
	}
	if len(start.Events) != 0 || start.NextAfter != 1<<40 {
		t.Errorf("page past the end = %+v", start)
	}

	if _, err := a.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"echo", "audited"}, Env: map[string]string{"PASSWORD": "hunter2"}}, warden.ExecIO{}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"/no/such/program"}}, warden.ExecIO{})
	apiErr(t, err, 404, warden.CodeNotFound)
	if _, err := a.WriteFile(ctx, id, "/tmp/audited.txt", strings.NewReader("file contents never audited"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := a.ReadFile(ctx, id, "/tmp/audited.txt", warden.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	if _, err := a.Stat(ctx, id, "/tmp/audited.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.List(ctx, id, "/tmp", 1); err != nil {
		t.Fatal(err)
	}
	u, err := a.Presign(ctx, id, warden.PresignRequest{Path: "/tmp/audited.txt", Op: warden.PresignRead})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := plain(t, "GET", u.URL, nil); status != 200 {
		t.Fatalf("presigned read: %d", status)
	}
	_, err = env.b.GetSandbox(ctx, id)
	apiErr(t, err, 404, warden.CodeNotFound)
	apiErr(t, env.b.KillSandbox(ctx, id), 404, warden.CodeNotFound)
	_, err = a.ListPrincipals(ctx)
	apiErr(t, err, 403, warden.CodeForbidden)
	k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{Name: "audited", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.RevokeKey(ctx, k.APIKey.ID); err != nil {
		t.Fatal(err)
	}
	// Reads that change nothing and show no contents are not audited.
	if _, err := a.GetSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Processes(ctx, id); err != nil {
		t.Fatal(err)
	}

	// Every other action, in an order the log must keep.
	ps, err := a.StartProcess(ctx, id, warden.ExecRequest{Cmd: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.SendStdin(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := ps.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Copy(nil, nil); err != nil {
		t.Fatal(err)
	}
	ps.Close()
	rs, err := a.StreamProcess(ctx, id, ps.PID(), true)
	if err != nil {
		t.Fatal(err)
	}
	rs.Copy(nil, nil)
	rs.Close()
	apiErr(t, a.Signal(ctx, id, ps.PID(), warden.SIGKILL), 404, warden.CodeNotFound)
	pty, err := a.PTY(ctx, id, warden.PTYOptions{Cmd: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pty)
	if code, err := pty.Wait(); err != nil || code != 0 {
		t.Fatalf("pty: %d %v", code, err)
	}
	if _, err := a.Mkdir(ctx, id, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Move(ctx, id, dir, dir+"2"); err != nil {
		t.Fatal(err)
	}
	w, err := a.Watch(ctx, id, dir+"2", false)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	rc, err = a.DownloadArchive(ctx, id, dir+"2")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	if err := a.UploadArchive(ctx, id, dir+"2", smallTar()); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, id, dir+"2"); err != nil {
		t.Fatal(err)
	}
	wu, err := a.Presign(ctx, id, warden.PresignRequest{Path: "/tmp/presigned-upload", Op: warden.PresignWrite})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := plain(t, "PUT", wu.URL, strings.NewReader("up")); status != 200 {
		t.Fatalf("presigned write: %d", status)
	}
	// A bad signature is not audited (anyone can send one).
	if status, _ := plain(t, "PUT", wu.URL+"0", strings.NewReader("up")); status != 403 {
		t.Fatalf("tampered presigned write: %d", status)
	}
	p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: "audited"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := a.CreateSandbox(ctx, warden.CreateSandboxRequest{Env: map[string]string{"API_TOKEN": "tok-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetTimeout(ctx, sb.ID, 60); err != nil {
		t.Fatal(err)
	}
	if err := a.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	var evs []warden.AuditEvent
	for ev, err := range admin.AllAuditEvents(ctx, warden.AuditQuery{After: after, Limit: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	type want struct {
		action, principal, target, outcome string
	}
	me, _ := admin.Whoami(ctx)
	wants := []want{
		{"process.exec", env.aID, id, "success"},
		{"process.exec", env.aID, id, "error"},
		{"file.write", env.aID, id, "success"},
		{"file.read", env.aID, id, "success"},
		{"file.stat", env.aID, id, "success"},
		{"file.list", env.aID, id, "success"},
		{"file.presign", env.aID, id, "success"},
		{"file.presigned_read", "", id, "success"},
		{"sandbox.get", env.bID, id, "denied"},
		{"sandbox.kill", env.bID, id, "denied"},
		{"principal.list", env.aID, "", "denied"},
		{"key.create", me.Principal.ID, k.APIKey.ID, "success"},
		{"key.revoke", me.Principal.ID, k.APIKey.ID, "success"},
		{"process.exec", env.aID, id, "success"},
		{"process.stdin", env.aID, id, "success"},
		{"process.close_stdin", env.aID, id, "success"},
		{"process.stream", env.aID, id, "success"},
		{"process.signal", env.aID, id, "error"},
		{"process.pty", env.aID, id, "success"},
		{"file.mkdir", env.aID, id, "success"},
		{"file.move", env.aID, id, "success"},
		{"file.watch", env.aID, id, "success"},
		{"archive.download", env.aID, id, "success"},
		{"archive.upload", env.aID, id, "success"},
		{"file.remove", env.aID, id, "success"},
		{"file.presign", env.aID, id, "success"},
		{"file.presigned_write", "", id, "success"},
		{"principal.create", me.Principal.ID, p.ID, "success"},
		{"sandbox.create", env.aID, sb.ID, "success"},
		{"sandbox.timeout", env.aID, sb.ID, "success"},
		// The daemon records the end itself (written while the kill runs,
		// so before the kill call's own event).
		{"sandbox.end", "system", sb.ID, "success"},
		{"sandbox.kill", env.aID, sb.ID, "success"},
	}
	if len(evs) != len(wants) {
		for _, ev := range evs {
			t.Logf("%d %s %s %s %s %v", ev.Seq, ev.Action, ev.PrincipalID, ev.Target, ev.Outcome, ev.Detail)
		}
		t.Fatalf("%d events, want %d", len(evs), len(wants))
	}
	for i, w := range wants {
		ev := evs[i]
		if ev.Action != w.action || ev.PrincipalID != w.principal || ev.Target != w.target || ev.Outcome != w.outcome {
			t.Errorf("event %d = %s %s %s %s, want %+v", i, ev.Action, ev.PrincipalID, ev.Target, ev.Outcome, w)
		}
		if (w.principal != "system" && !strings.HasPrefix(ev.RequestID, "req-")) || ev.Hash == "" || ev.PrevHash == "" || ev.Seq <= after {
			t.Errorf("event %d = %+v", i, ev)
		}
		raw, _ := json.Marshal(ev.Detail)
		for _, secret := range []string{"hunter2", "tok-secret", "file contents never audited", k.Key, "sig="} {
			if strings.Contains(string(raw), secret) {
				t.Errorf("event %s detail leaks %q: %s", ev.Action, secret, raw)
			}
		}
	}
	if cmd, _ := json.Marshal(evs[0].Detail["cmd"]); string(cmd) != `["echo","audited"]` || evs[0].Detail["pid"] == nil {
		t.Errorf("exec detail = %v", evs[0].Detail)
	}
	if evs[1].Detail["error"] != "not_found" {
		t.Errorf("failed exec detail = %v", evs[1].Detail)
	}
	if evs[2].Detail["path"] != "/tmp/audited.txt" || evs[2].Detail["bytes"] != float64(27) {
		t.Errorf("write detail = %v", evs[2].Detail)
	}

	// Filters.
	page, err := admin.ListAudit(ctx, warden.AuditQuery{After: after, Principal: env.bID})
	if err != nil || len(page.Events) != 2 {
		t.Errorf("principal filter: %d events, %v", len(page.Events), err)
	}
	page, err = admin.ListAudit(ctx, warden.AuditQuery{After: after, Target: k.APIKey.ID})
	if err != nil || len(page.Events) != 2 {
		t.Errorf("target filter: %d events, %v", len(page.Events), err)
	}

	rep, err := admin.VerifyAudit(ctx)
	if err != nil || !rep.OK || rep.Checked < int64(len(wants)) || len(rep.Problems) != 0 {
		t.Fatalf("verify = %+v %v", rep, err)
	}
}

// smallTar returns a tar archive of one small file.
func smallTar() io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("f"))
	tw.Close()
	return &buf
}
