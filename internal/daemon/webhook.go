package daemon

import (
	"fmt"
	"net/netip"

	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/webhook"
)

// buildWebhooks starts the signed outgoing webhooks (docs/webhooks.md)
// when endpoints are configured; the returned stop ends their deliveries.
func (d *daemon) buildWebhooks() (stop func(), err error) {
	cfg := d.cfg.Webhooks
	if len(cfg.Endpoints) == 0 {
		return func() {}, nil
	}
	if err := webhook.Check(cfg.Endpoints, cfg.AllowHTTP); err != nil {
		return nil, err
	}
	cur, ok := d.st.(store.WebhookStore)
	if !ok {
		return nil, fmt.Errorf("webhooks: the store keeps no delivery cursors")
	}
	var deny []netip.Prefix
	for _, c := range d.cfg.Network.Deny {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("network.deny %q: %w", c, err)
		}
		deny = append(deny, p)
	}
	dial, err := safedial.New(safedial.Options{Dest: network.NewDestinationPolicy(deny), Allow: cfg.AllowHosts,
		AllowHTTP: cfg.AllowHTTP, MaxRedirects: -1})
	if err != nil {
		return nil, fmt.Errorf("webhooks: dialer: %w", err)
	}
	head := func() int64 { s, _ := d.alog.Head(); return s }
	wh, err := webhook.New(webhook.Config{Endpoints: cfg.Endpoints, Audit: d.st, Cursors: cur, Secrets: d.vault,
		Head: head, Client: dial.Client(), Log: d.log.With("subsystem", "webhooks")})
	if err != nil {
		return nil, err
	}
	return wh.Close, nil
}
