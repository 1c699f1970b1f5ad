package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestMonitorConformance(t *testing.T) {
	storetest.RunMonitor(t, func(t *testing.T) store.MonitorStore { return openTemp(t) })
}
