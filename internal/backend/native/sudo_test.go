package native_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/backend/backendtest"
)

// TestSudoMount: a sandbox's sudo is a read-only bind mount of the agent
// binary, not a copy in its writable layer (backendtest.Sudo).
func TestSudoMount(t *testing.T) {
	backendtest.Sudo(t, backendtest.Factory{New: newBackend, Spec: baseSpec, HostPaths: hostPaths})
}
