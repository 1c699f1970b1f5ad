package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestSandboxUsageConformance(t *testing.T) {
	storetest.RunSandboxUsage(t, func(t *testing.T) store.SandboxUsageStore { return openTemp(t) })
}
