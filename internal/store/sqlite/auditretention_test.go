package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestAuditRetentionConformance(t *testing.T) {
	storetest.RunAuditRetention(t, func(t *testing.T) storetest.AuditRetentionStores { return openTemp(t) })
}
