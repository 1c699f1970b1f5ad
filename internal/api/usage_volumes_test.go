package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/volume"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestVolumeUsage: a principal's volumes are in GET /v1/usage by
// principal (volumes, volume_bytes: what their filesystems use now) and in
// /metrics as warden_volume_used_bytes.
func TestVolumeUsage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("VOLUME USAGE UNTESTED HERE: needs root (loop devices, mounts)")
	}
	ctx := ctxT(t, 120*time.Second)
	vs, ok := env.st.(store.VolumeStore)
	if !ok {
		t.Fatal("the test store keeps no volumes")
	}
	vm, err := volume.New(volume.Config{Dir: t.TempDir(), UID: 1000, GID: 1000}, vs)
	if err != nil {
		t.Fatalf("this host cannot make volumes: %v", err)
	}
	cfg := env.srv.cfg
	cfg.Metrics = nil
	cfg.Volumes = vm
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	p, key := govUser(t, "volusage", auth.ScopeSandboxesCreate, auth.ScopeFilesWrite)
	c, err := warden.New(warden.WithBaseURL(hs.URL), warden.WithAPIKey(key), warden.WithRetry(warden.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	const size = 3 << 20
	for _, n := range []string{"usage-a", "usage-b"} {
		if _, err := c.CreateVolume(ctx, n, 32); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteVolume(ctx, n) })
	}
	// Random-ish bytes (not zeros, which a filesystem may not store).
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if _, err := c.WriteVolumeFile(ctx, "usage-a", "/big", bytes.NewReader(data), 0); err != nil {
		t.Fatal(err)
	}

	r := call(t, hs, env.adminKey, "GET", "/v1/usage?group_by=principal&principal="+p.ID, "", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	var rep struct {
		Rows []usageRow `json:"rows"`
	}
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Key != p.ID || rep.Rows[0].Volumes != 2 || rep.Rows[0].VolumeBytes < size {
		t.Fatalf("usage rows %s, want %s with 2 volumes and at least %d bytes", r.body, p.ID, size)
	}
	// Other groupings do not carry volumes.
	r = call(t, hs, env.adminKey, "GET", "/v1/usage?group_by=day&principal="+p.ID, "", nil, nil)
	if r.status != http.StatusOK || bytes.Contains(r.body, []byte(`"volumes":2`)) {
		t.Fatalf("usage by day: %d %s", r.status, r.body)
	}

	req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+env.adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`warden_volume_used_bytes\{principal="` + regexp.QuoteMeta(p.ID) + `",volume="usage-a"\} (\S+)`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no warden_volume_used_bytes for usage-a in /metrics:\n%s", body)
	}
	if v, _ := strconv.ParseFloat(string(m[1]), 64); v < size {
		t.Errorf("warden_volume_used_bytes %s, want at least %d", m[1], size)
	}
}
