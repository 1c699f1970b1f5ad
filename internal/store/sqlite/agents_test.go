package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestAgentsConformance(t *testing.T) {
	storetest.RunAgents(t, func(t *testing.T) store.Store { return openTemp(t) })
}
