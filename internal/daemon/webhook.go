package daemon

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/webhook"
)

// webhooks are the signed outgoing webhooks (docs/webhooks.md): the
// dispatcher with its deliverers and the admin behind /v1/webhooks.
type webhooks struct {
	disp  *webhook.Dispatcher
	admin *webhook.Admin
}

// prepareWebhooks checks the config file's endpoints and builds the
// dispatcher and the admin; no deliverer runs until buildWebhooks.
func (d *daemon) prepareWebhooks() error {
	cfg := d.cfg.Webhooks
	if err := webhook.Check(cfg.Endpoints, cfg.AllowHTTP); err != nil {
		return err
	}
	cur, ok := d.st.(store.WebhookStore)
	if !ok {
		if len(cfg.Endpoints) > 0 {
			return fmt.Errorf("webhooks: the store keeps no delivery cursors")
		}
		return nil
	}
	var deny []netip.Prefix
	for _, c := range d.cfg.Network.Deny {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("network.deny %q: %w", c, err)
		}
		deny = append(deny, p)
	}
	dial, err := safedial.New(safedial.Options{Dest: network.NewDestinationPolicy(deny), Allow: cfg.AllowHosts,
		AllowHTTP: cfg.AllowHTTP, MaxRedirects: -1})
	if err != nil {
		return fmt.Errorf("webhooks: dialer: %w", err)
	}
	head := func() int64 { s, _ := d.alog.Head(); return s }
	disp, err := webhook.New(webhook.Config{Audit: d.st, Cursors: cur, Secrets: d.vault,
		Head: head, Client: dial.Client(), Log: d.log.With("subsystem", "webhooks")})
	if err != nil {
		return err
	}
	d.webhooks = &webhooks{disp: disp}
	if es, ok := d.st.(store.WebhookEndpointStore); ok {
		if d.webhooks.admin, err = webhook.NewAdmin(webhook.AdminConfig{Dispatcher: disp, Store: es, Config: cfg.Endpoints,
			CheckURL: dial.CheckURL, AllowHTTP: cfg.AllowHTTP}); err != nil {
			disp.Close()
			return err
		}
	}
	return nil
}

// webhookAdmin is the admin behind /v1/webhooks (nil: the routes 503).
func (d *daemon) webhookAdmin() *webhook.Admin {
	if d.webhooks == nil {
		return nil
	}
	return d.webhooks.admin
}

// buildWebhooks starts the deliverers of the config file's endpoints and
// of the stored, enabled ones; the returned stop ends their deliveries.
func (d *daemon) buildWebhooks() (stop func(), err error) {
	if d.webhooks == nil {
		return func() {}, nil
	}
	disp := d.webhooks.disp
	for _, e := range d.cfg.Webhooks.Endpoints {
		if err := disp.Start(e, webhook.SourceConfig); err != nil {
			disp.Close()
			return nil, err
		}
	}
	if a := d.webhooks.admin; a != nil {
		if err := a.Start(context.Background()); err != nil {
			disp.Close()
			return nil, err
		}
	}
	return disp.Close, nil
}
