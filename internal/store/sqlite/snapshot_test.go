package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestSnapshotConformance(t *testing.T) {
	storetest.RunSnapshots(t, func(t *testing.T) (store.Store, store.SnapshotStore) { s := openTemp(t); return s, s })
}
