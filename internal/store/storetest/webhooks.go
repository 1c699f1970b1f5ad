package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// WebhookEndpointStores is what RunWebhookEndpoints tests: the endpoints
// and the cursors (deleting an endpoint removes its cursor).
type WebhookEndpointStores interface {
	store.WebhookEndpointStore
	store.WebhookStore
}

// RunWebhookEndpoints runs the conformance tests of
// store.WebhookEndpointStore, and of the delivery state kept with the
// cursors, against stores returned by open.
func RunWebhookEndpoints(t *testing.T, open func(t *testing.T) WebhookEndpointStores) {
	t.Run("Endpoints", func(t *testing.T) { testWebhookEndpoints(t, open(t)) })
	t.Run("DeliveryState", func(t *testing.T) { testWebhookDeliveryState(t, open(t)) })
}

func webhookEndpoint(name string) store.WebhookEndpoint {
	return store.WebhookEndpoint{Name: name, URL: "https://hooks.example.com/" + name, SecretID: "sec_" + name,
		Events: []string{"sandbox.*", "approval.request"}, MaxAttempts: 3, Enabled: true, CreatedBy: "alice",
		CreatedAt: base, UpdatedAt: base}
}

func testWebhookEndpoints(t *testing.T, s WebhookEndpointStores) {
	if _, err := s.GetWebhookEndpoint(ctx(t), "soc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get before create: %v, want ErrNotFound", err)
	}
	if l, err := s.ListWebhookEndpoints(ctx(t)); err != nil || len(l) != 0 {
		t.Fatalf("empty list: %v %v", l, err)
	}
	soc := webhookEndpoint("soc")
	soc.Outcomes = []string{"denied"}
	for _, e := range []store.WebhookEndpoint{soc, webhookEndpoint("chat")} {
		if err := s.CreateWebhookEndpoint(ctx(t), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateWebhookEndpoint(ctx(t), webhookEndpoint("soc")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate name: %v, want ErrConflict", err)
	}
	bad := webhookEndpoint("bad")
	bad.Events = nil
	if err := s.CreateWebhookEndpoint(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no events: %v, want ErrInvalid", err)
	}
	got, err := s.GetWebhookEndpoint(ctx(t), "soc")
	if err != nil || !reflect.DeepEqual(got, soc) {
		t.Fatalf("get:\n got %+v %v\nwant %+v", got, err, soc)
	}
	l, err := s.ListWebhookEndpoints(ctx(t))
	if err != nil || len(l) != 2 || l[0].Name != "chat" || l[1].Name != "soc" || l[0].Outcomes != nil {
		t.Fatalf("list (by name; no outcomes is nil): %+v %v", l, err)
	}

	later := base.Add(time.Hour)
	up, err := s.UpdateWebhookEndpoint(ctx(t), "soc", func(e *store.WebhookEndpoint) error {
		e.URL, e.Enabled, e.Outcomes, e.UpdatedAt = "https://other.example.com/x", false, nil, later
		return nil
	})
	if err != nil || up.URL != "https://other.example.com/x" || up.Enabled {
		t.Fatalf("update: %+v %v", up, err)
	}
	if got, _ := s.GetWebhookEndpoint(ctx(t), "soc"); got.URL != up.URL || got.Enabled || !got.UpdatedAt.Equal(later) || got.Outcomes != nil {
		t.Fatalf("after update: %+v", got)
	}
	if _, err := s.UpdateWebhookEndpoint(ctx(t), "soc", func(e *store.WebhookEndpoint) error { e.Name = "x"; return nil }); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("rename: %v, want ErrInvalid", err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateWebhookEndpoint(ctx(t), "soc", func(e *store.WebhookEndpoint) error { e.URL = "https://lost"; return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn error: %v", err)
	}
	if got, _ := s.GetWebhookEndpoint(ctx(t), "soc"); got.URL != up.URL {
		t.Fatalf("a failed update changed the endpoint: %+v", got)
	}
	if _, err := s.UpdateWebhookEndpoint(ctx(t), "none", func(*store.WebhookEndpoint) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v, want ErrNotFound", err)
	}

	// Deleting removes the endpoint's cursor with it; others' stay.
	for _, n := range []string{"soc", "chat"} {
		if err := s.SetWebhookCursor(ctx(t), store.WebhookCursor{Endpoint: n, Seq: 7, UpdatedAt: base, Delivered: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteWebhookEndpoint(ctx(t), "soc"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWebhookEndpoint(ctx(t), "soc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v, want ErrNotFound", err)
	}
	if _, err := s.GetWebhookEndpoint(ctx(t), "soc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := s.WebhookCursor(ctx(t), "soc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the deleted endpoint's cursor: %v, want ErrNotFound", err)
	}
	if c, err := s.WebhookCursor(ctx(t), "chat"); err != nil || c.Seq != 7 {
		t.Fatalf("another endpoint's cursor: %+v %v", c, err)
	}
}

func testWebhookDeliveryState(t *testing.T, s WebhookEndpointStores) {
	at := base.Add(time.Minute)
	want := store.WebhookCursor{Endpoint: "soc", Seq: 12, UpdatedAt: at, LastAttemptAt: at, LastStatus: 503,
		LastError: "the receiver answered 503", Attempts: 2, Delivered: 10, GivenUp: 1, LastDeliveredAt: base}
	if err := s.SetWebhookCursor(ctx(t), want); err != nil {
		t.Fatal(err)
	}
	got, err := s.WebhookCursor(ctx(t), "soc")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("state:\n got %+v %v\nwant %+v", got, err, want)
	}
	// The whole row is replaced: a success clears the error and attempts.
	want = store.WebhookCursor{Endpoint: "soc", Seq: 13, UpdatedAt: at, LastAttemptAt: at, LastStatus: 200, Delivered: 11,
		GivenUp: 1, LastDeliveredAt: at}
	if err := s.SetWebhookCursor(ctx(t), want); err != nil {
		t.Fatal(err)
	}
	if got, err := s.WebhookCursor(ctx(t), "soc"); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("state after success:\n got %+v %v\nwant %+v", got, err, want)
	}
}
