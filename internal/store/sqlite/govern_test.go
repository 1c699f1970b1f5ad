package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestGovernConformance(t *testing.T) {
	storetest.RunGovern(t, func(t *testing.T) store.GovernStore { return openTemp(t) })
}
