package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestHealthAndSpec(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	h, err := client("").Health(ctx)
	if err != nil || h.Status != "ok" || h.Version != "test" {
		t.Fatalf("health = %+v, %v", h, err)
	}
	resp, err := http.Get(env.hs.URL + "/v1/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.HasPrefix(b, []byte("openapi: 3.1.0")) || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("openapi.yaml: %d %q", resp.StatusCode, b[:min(len(b), 40)])
	}
}

func TestRequestID(t *testing.T) {
	for _, tc := range []struct{ sent, want string }{
		{"my-trace-1234", "my-trace-1234"},
		{"bad id with spaces", ""},
		{strings.Repeat("x", 200), ""},
	} {
		req, _ := http.NewRequest("GET", env.hs.URL+"/v1/sandboxes/sb-nope", nil)
		req.Header.Set("Authorization", "Bearer "+env.aKey)
		req.Header.Set("X-Request-Id", tc.sent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Header.Get("X-Request-Id")
		body := decodeErrorBody(t, resp)
		if tc.want != "" && got != tc.want {
			t.Errorf("sent %q, got request id %q", tc.sent, got)
		}
		if tc.want == "" && (got == tc.sent || !strings.HasPrefix(got, "req-")) {
			t.Errorf("sent insane %q, got request id %q", tc.sent, got)
		}
		if body.Error.RequestID != got {
			t.Errorf("body request id %q, header %q", body.Error.RequestID, got)
		}
	}
}

func TestSandboxLifecycle(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	a := env.a
	team := "infra-" + uniq()

	// Get the shared sandbox, and check the env values never come back.
	sb, err := a.GetSandbox(ctx, env.sbA)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != warden.StateRunning || sb.Owner != env.aID || sb.Backend != testBackendID() || sb.Template != "base" || sb.Metadata["role"] != "shared" {
		t.Fatalf("shared sandbox = %+v", sb)
	}

	sb1, err := a.CreateSandbox(ctx, warden.CreateSandboxRequest{
		Env:            map[string]string{"SECRET_TOKEN": "s3cr3t-value"},
		Metadata:       map[string]string{"team": team, "job": "1"},
		TimeoutSeconds: 120, MemoryMB: 256, CPUMillis: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb1.State != warden.StateRunning || sb1.MemoryMB != 256 || sb1.CPUMillis != 500 || sb1.EndedAt != nil ||
		!slices.Equal(sb1.EnvKeys, []string{"SECRET_TOKEN"}) || sb1.User != "user" || sb1.Workdir != "/home/user" {
		t.Fatalf("created = %+v", sb1)
	}
	if d := time.Until(sb1.ExpiresAt); d < 100*time.Second || d > 125*time.Second {
		t.Errorf("expires in %v, want about 120s", d)
	}
	raw := getRaw(t, env.aKey, "/v1/sandboxes/"+sb1.ID)
	if strings.Contains(raw, "s3cr3t-value") || !strings.Contains(raw, `"ended_at":null`) || !strings.Contains(raw, `"end_reason":null`) {
		t.Errorf("raw sandbox JSON: %s", raw)
	}
	var out bytes.Buffer
	res, err := a.Exec(ctx, sb1.ID, warden.ExecRequest{Command: "echo $SECRET_TOKEN"}, warden.ExecIO{Stdout: &out})
	if err != nil || !res.Success() || out.String() != "s3cr3t-value\n" {
		t.Fatalf("sandbox env: %q %+v %v", out.String(), res, err)
	}
	sb2, err := a.CreateSandbox(ctx, warden.CreateSandboxRequest{Metadata: map[string]string{"team": team, "job": "2"}})
	if err != nil {
		t.Fatal(err)
	}

	// List: metadata filter, state filter, pagination (newest first).
	page, err := a.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"team": team}})
	if err != nil {
		t.Fatal(err)
	}
	if ids := sandboxIDs(page.Sandboxes); !slices.Equal(ids, []string{sb2.ID, sb1.ID}) || page.NextPageToken != "" {
		t.Fatalf("metadata filter: %v next=%q", ids, page.NextPageToken)
	}
	page, err = a.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"team": team, "job": "1"}})
	if err != nil || !slices.Equal(sandboxIDs(page.Sandboxes), []string{sb1.ID}) {
		t.Fatalf("two-pair metadata filter: %v %v", sandboxIDs(page.Sandboxes), err)
	}
	var paged []string
	opts := warden.ListOptions{Limit: 1, State: warden.StateRunning}
	for range 10 {
		page, err := a.ListSandboxes(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Sandboxes) > 1 {
			t.Fatalf("limit 1 gave %d", len(page.Sandboxes))
		}
		paged = append(paged, sandboxIDs(page.Sandboxes)...)
		if page.NextPageToken == "" {
			break
		}
		opts.PageToken = page.NextPageToken
	}
	for _, id := range []string{sb2.ID, sb1.ID, env.sbA} {
		if !slices.Contains(paged, id) {
			t.Errorf("paging running sandboxes missed %s: %v", id, paged)
		}
	}
	if i, j := slices.Index(paged, sb2.ID), slices.Index(paged, sb1.ID); i > j {
		t.Errorf("pages not newest first: %v", paged)
	}

	// Timeout.
	sb1, err = a.SetTimeout(ctx, sb1.ID, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(sb1.ExpiresAt); d < 3500*time.Second {
		t.Errorf("after SetTimeout expires in %v", d)
	}
	if _, err := a.SetTimeout(ctx, sb1.ID, 0); err == nil {
		t.Error("SetTimeout(0) succeeded")
	} else {
		apiErr(t, err, 422, warden.CodeValidationFailed)
	}

	// Usage.
	u, err := a.Usage(ctx, sb1.ID)
	if err != nil || u.PIDs < 1 || u.MemoryBytes <= 0 {
		t.Errorf("usage = %+v, %v", u, err)
	}

	// Kill, twice; then the sandbox is stopped and refuses work with 409.
	if err := a.KillSandbox(ctx, sb1.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.KillSandbox(ctx, sb1.ID); err != nil {
		t.Fatalf("second kill: %v", err)
	}
	sb1, err = a.GetSandbox(ctx, sb1.ID)
	if err != nil || sb1.State != warden.StateStopped || sb1.EndedAt == nil || sb1.EndReason != "killed" {
		t.Fatalf("after kill: %+v %v", sb1, err)
	}
	_, err = a.Exec(ctx, sb1.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
	apiErr(t, err, 409, warden.CodeConflict)
	if !strings.Contains(err.Error(), "stopped") {
		t.Errorf("conflict message does not name the state: %v", err)
	}
	_, err = a.SetTimeout(ctx, sb1.ID, 60)
	apiErr(t, err, 409, warden.CodeConflict)
	_, err = a.Usage(ctx, sb1.ID)
	apiErr(t, err, 409, warden.CodeConflict)
	page, err = a.ListSandboxes(ctx, warden.ListOptions{State: warden.StateStopped})
	if err != nil || !slices.Contains(sandboxIDs(page.Sandboxes), sb1.ID) || slices.Contains(sandboxIDs(page.Sandboxes), sb2.ID) {
		t.Errorf("stopped filter: %v %v", sandboxIDs(page.Sandboxes), err)
	}
	if err := a.KillSandbox(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}

	// Unknown sandbox.
	_, err = a.GetSandbox(ctx, "sb-doesnotexist")
	apiErr(t, err, 404, warden.CodeNotFound)
}

func TestMetrics(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	if _, err := env.a.GetSandbox(ctx, env.sbA); err != nil {
		t.Fatal(err)
	}
	sb, err := env.a.CreateSandbox(ctx, warden.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.a.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	m := getRaw(t, env.adminKey, "/metrics")
	for _, want := range []string{
		`warden_http_requests_total{code="200",route="GET /v1/sandboxes/{id}"}`,
		`warden_http_request_duration_seconds_bucket{route="GET /v1/sandboxes/{id}"`,
		`warden_sandboxes{state="running"}`,
		`warden_sandboxes_created_total{outcome="success"}`,
		`warden_sandbox_create_duration_seconds_count{outcome="success"}`,
		`warden_sandboxes_ended_total{state="stopped"}`,
		`go_goroutines`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func sandboxIDs(sbs []warden.Sandbox) []string {
	ids := make([]string, len(sbs))
	for i, sb := range sbs {
		ids[i] = sb.ID
	}
	return ids
}

// getRaw GETs path with the key (none when empty) and returns the body of a
// 200 answer.
func getRaw(t *testing.T, key, path string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", env.hs.URL+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}
