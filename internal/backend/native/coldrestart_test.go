package native_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/native"
)

// TestColdRestartDisk runs the conformance suite's cold restart test
// (E2B's filesystem-only pause: backend.Restarter) on writable layers in
// disk images, as wardend has them by default: the conformance run keeps
// them in memory unless WARDEN_TEST_DISK is set, where native refuses it.
func TestColdRestartDisk(t *testing.T) {
	diskDir := filepath.Join(filepath.Dir(runDir), "disks")
	newDisk := func(t *testing.T) backend.Backend {
		b, err := native.New(native.Config{RunDir: runDir, AgentPath: agentBin, Landlock: testLandlock(), DiskDir: diskDir})
		if err != nil {
			t.Fatal(err)
		}
		if medium, why := b.WritableLayer(); medium != "disk" {
			t.Fatalf("writable layer in %s: %v", medium, why)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("close backend: %v", err)
			}
		})
		return b
	}
	backendtest.ColdRestart(t, backendtest.Factory{New: newDisk, Spec: baseSpec, Leftovers: func(t *testing.T, id string) []string {
		left := leftovers(t, id)
		if _, err := os.Stat(filepath.Join(diskDir, id+".img")); err == nil {
			left = append(left, "disk image "+filepath.Join(diskDir, id+".img"))
		}
		return left
	}})
}
