package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestVolumeSnapshotConformance(t *testing.T) {
	storetest.RunVolumeSnapshots(t, func(t *testing.T) (store.VolumeStore, store.VolumeSnapshotStore) { s := openTemp(t); return s, s })
}
