package warden

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// PreviewURL returns a signed URL that reaches TCP port port of the sandbox (a web app
// the sandbox serves on 127.0.0.1:port) through the daemon's reverse proxy, HTTP and
// WebSocket, without an API key until it expires. ttl is the URL's lifetime, rounded up to
// whole seconds; 0 takes the daemon's default (1 hour); at most 7 days.
//
// The URL carries a warden_token query parameter; the first request with it sets a
// cookie, so that the app's own links and requests keep working in a browser. Anyone
// holding the URL can use the port until it expires. Safe to retry.
func (c *Client) PreviewURL(ctx context.Context, id string, port int, ttl time.Duration) (Preview, error) {
	body := map[string]int64{}
	if ttl > 0 {
		body["expires_seconds"] = int64((ttl + time.Second - 1) / time.Second)
	}
	var p Preview
	err := c.do(ctx, &request{
		method:     http.MethodPost,
		path:       pathf("/v1/sandboxes/%s/ports/%d/url", id, port),
		json:       body,
		idempotent: true,
	}, &p)
	if err != nil {
		return Preview{}, fmt.Errorf("preview url of port %d of sandbox %s: %w", port, id, err)
	}
	return p, nil
}

// PublishPort makes TCP port port of the sandbox public (public true): its preview URLs
// then need no API key or token, for anyone who can reach the daemon. With public false
// the port is private again (the default). Ports are private again when the sandbox ends
// and when the daemon restarts. Safe to retry.
func (c *Client) PublishPort(ctx context.Context, id string, port int, public bool) (Port, error) {
	var p Port
	err := c.do(ctx, &request{
		method:     http.MethodPost,
		path:       pathf("/v1/sandboxes/%s/ports/%d", id, port),
		json:       map[string]bool{"public": public},
		idempotent: true,
	}, &p)
	if err != nil {
		verb := "publish"
		if !public {
			verb = "unpublish"
		}
		return Port{}, fmt.Errorf("%s port %d of sandbox %s: %w", verb, port, id, err)
	}
	return p, nil
}
