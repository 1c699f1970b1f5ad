package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestMemoryTeamConformance(t *testing.T) {
	storetest.RunMemoryTeams(t, func(t *testing.T) store.MemoryTeamStore { return openTemp(t) })
}
