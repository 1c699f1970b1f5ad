package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestAgentRunCostConformance(t *testing.T) {
	storetest.RunAgentRunCost(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestAgentCronConformance(t *testing.T) {
	storetest.RunAgentCron(t, func(t *testing.T) store.Store { return openTemp(t) })
}
