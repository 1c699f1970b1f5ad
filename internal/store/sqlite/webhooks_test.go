package sqlite_test

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func TestWebhookEndpointConformance(t *testing.T) {
	storetest.RunWebhookEndpoints(t, func(t *testing.T) storetest.WebhookEndpointStores { return openTemp(t) })
}
