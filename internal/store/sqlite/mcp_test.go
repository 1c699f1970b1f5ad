package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestMCPConformance(t *testing.T) {
	storetest.RunMCP(t, func(t *testing.T) store.Store { return openTemp(t) })
}
