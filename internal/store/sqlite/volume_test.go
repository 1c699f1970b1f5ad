package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestVolumeConformance(t *testing.T) {
	storetest.RunVolumes(t, func(t *testing.T) (store.Store, store.VolumeStore) { s := openTemp(t); return s, s })
}
