package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunWebhook runs the conformance tests of store.WebhookStore against
// stores returned by open.
func RunWebhook(t *testing.T, open func(t *testing.T) store.WebhookStore) {
	t.Run("Cursors", func(t *testing.T) {
		s := open(t)
		if _, err := s.WebhookCursor(ctx(t), "soc"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("no cursor yet: %v, want ErrNotFound", err)
		}
		at := base.Add(time.Minute)
		for _, seq := range []int64{5, 9} {
			if err := s.SetWebhookCursor(ctx(t), store.WebhookCursor{Endpoint: "soc", Seq: seq, UpdatedAt: at}); err != nil {
				t.Fatal(err)
			}
		}
		c, err := s.WebhookCursor(ctx(t), "soc")
		if err != nil || c.Seq != 9 || !c.UpdatedAt.Equal(at) {
			t.Fatalf("cursor %+v %v, want seq 9 at %v", c, err, at)
		}
		if _, err := s.WebhookCursor(ctx(t), "other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another endpoint's cursor: %v", err)
		}
		if err := s.SetWebhookCursor(ctx(t), store.WebhookCursor{Seq: 1, UpdatedAt: at}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("no endpoint: %v, want ErrInvalid", err)
		}
	})
}
