package backendtest

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
)

// testCapabilities checks that the backend declares in Capabilities exactly
// the optional interfaces it implements: callers decide from Capabilities,
// then call through the interfaces.
func testCapabilities(t *testing.T, _ Factory, b backend.Backend) {
	if err := backend.CheckCapabilities(b); err != nil {
		t.Fatal(err)
	}
}
