package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestWebhookConformance(t *testing.T) {
	storetest.RunWebhook(t, func(t *testing.T) store.WebhookStore { return openTemp(t) })
}
