package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.RunMemory(t, func(t *testing.T) store.MemoryStore { return openTemp(t) })
}
