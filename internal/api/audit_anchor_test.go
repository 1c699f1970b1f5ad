package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	warden "github.com/warden-sandbox/warden/sdk/go"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

// TestAuditAnchorRoute: GET /v1/audit/anchor serves nothing before
// retention, then an anchor the client-side checker accepts.
func TestAuditAnchorRoute(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, _ := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	seed, _ := audit.LoadOrCreateKey(filepath.Join(dir, "cp.key"))
	l, err := audit.New(ctx, audit.Config{Store: st, Key: key, CheckpointPath: filepath.Join(dir, "audit.checkpoint"), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pubFile := filepath.Join(dir, "cp.pub")
	pub, err := audit.NewPublisher(ctx, audit.PublisherConfig{Store: st, Checkpoints: st, Seed: seed, Origin: "warden-audit/test", PublicKeyFile: pubFile})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{st: st}
	get := func() (warden.AuditAnchor, string) {
		rec := httptest.NewRecorder()
		if err := s.getAuditAnchor(rec, httptest.NewRequest("GET", "/v1/audit/anchor", nil)); err != nil || rec.Code != 200 {
			t.Fatalf("GET /v1/audit/anchor: %d %v", rec.Code, err)
		}
		var a warden.AuditAnchor
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		return a, rec.Body.String()
	}
	if a, body := get(); a.Size != 0 || a.Checkpoint != nil || body != `{"size":0,"nodes":{}}`+"\n" {
		t.Fatalf("before retention: %s", body)
	}
	old := time.Now().Add(-72 * time.Hour)
	for i := range 9 {
		at := old
		if i >= 6 {
			at = time.Now()
		}
		if _, err := l.Append(ctx, audit.Event{Action: "sandbox.create", Target: fmt.Sprint("sb-", i), Outcome: "success", Time: at}); err != nil {
			t.Fatal(err)
		}
		if i == 5 {
			if _, _, err := pub.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res, err := pub.Prune(ctx, l, time.Now().Add(-24*time.Hour), 0); err != nil || res.Size != 6 {
		t.Fatalf("Prune: %+v %v", res, err)
	}
	a, body := get()
	vkey, _ := os.ReadFile(pubFile)
	if a.Size != 6 || a.Checkpoint == nil || a.Checkpoint.N != 1 || a.PrunedAt.IsZero() {
		t.Fatalf("after retention: %s", body)
	}
	an, err := auditcheck.ParseAnchor(a.Size, a.Hash, a.Checkpoint.Note, a.Nodes, string(vkey))
	if err != nil {
		t.Fatal(err)
	}
	lc := auditcheck.NewLogCheckerFrom(nil, an)
	_ = st.WalkAudit(ctx, func(e audit.Event) error { lc.Add(e.Seq, e.PrevHash, e.Hash); return nil })
	if r := lc.Finish(); !r.OK || r.Pruned != 6 || r.Checked != 3 {
		t.Fatalf("checker: %+v", r)
	}
}
