package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestLLMSandboxUsage(t *testing.T) {
	storetest.RunLLMSandboxUsage(t, func(t *testing.T) store.UsageStore { return openTemp(t) })
}
