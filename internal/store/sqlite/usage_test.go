package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestUsageConformance(t *testing.T) {
	storetest.RunUsage(t, func(t *testing.T) store.UsageStore { return openTemp(t) })
}
