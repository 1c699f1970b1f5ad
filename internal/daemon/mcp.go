package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"

	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/mcpgw/hosted"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/safefile"
)

// buildMCP builds the MCP gateway (docs/mcp.md): virtual servers at
// /mcp/v/{server} on the API listener, remote connectors through the safe
// dialer, hosted connectors in sandboxes, and the builtin connector
// calling the native API in process.
func (d *daemon) buildMCP() error {
	cfg := d.cfg
	var deny []netip.Prefix
	for _, c := range cfg.Network.Deny {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("network.deny %q: %w", c, err)
		}
		deny = append(deny, p)
	}
	dial, err := safedial.New(safedial.Options{Dest: network.NewDestinationPolicy(deny),
		Allow: cfg.MCP.AllowHosts, AllowHTTP: cfg.MCP.AllowHTTP,
		// Streams (SSE) are long; each message is bounded by the gateway.
		MaxResponseBytes: -1})
	if err != nil {
		return fmt.Errorf("mcp gateway: connector dialer: %w", err)
	}
	runner, err := hosted.New(hosted.Config{Sandboxes: d.mgr, Connectors: d.st, Log: d.log.With("subsystem", "mcp-hosted")})
	if err != nil {
		return fmt.Errorf("mcp gateway: hosted connectors: %w", err)
	}
	publicURL := cfg.PublicURL
	if publicURL == "" && cfg.Listen != "" {
		publicURL = "http://" + cfg.Listen
	}
	// The key signing the audience-bound tokens MCP clients get at
	// /mcp/token (tokens outlive a restart, not their API key).
	tokenKey, err := safefile.LoadOrCreateKey(filepath.Join(cfg.StateDir, "mcp-token.key"), 32)
	if err != nil {
		return fmt.Errorf("mcp gateway: token key: %w", err)
	}
	gw, err := mcpgw.New(mcpgw.Config{Store: d.st, Auth: d.authn, Govern: d.gov, Audit: d.audits, Secrets: d.vault,
		HTTPClient: dial.Client, Hosted: runner, API: traceBuiltin(d.srv.Handler()), Memory: d.memoryTools(), AllowedOrigins: cfg.MCP.AllowedOrigins,
		PublicURL: publicURL, PostResult: d.mwPost(), Log: d.log.With("subsystem", "mcp"),
		TokenKey: tokenKey, KeyIdentity: d.keyIdentity})
	if err != nil {
		return err
	}
	d.mcp, d.hosted = gw, runner
	return nil
}

// startMCP starts the hosted connectors' supervisor (after reaping the
// sandboxes an earlier daemon left) until ctx ends; stopMCP closes the
// upstream sessions and the hosted sandboxes.
func (d *daemon) startMCP(ctx context.Context) {
	if n, err := d.hosted.Reap(ctx); err != nil {
		d.log.Warn("mcp gateway: reap hosted connector sandboxes", "err", err)
	} else if n > 0 {
		d.log.Info("mcp gateway: killed hosted connector sandboxes of an earlier run", "count", n)
	}
	go d.hosted.Run(ctx)
}

func (d *daemon) stopMCP() {
	d.mcp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.hosted.Close(ctx); err != nil {
		d.log.Warn("mcp gateway: close hosted connectors", "err", err)
	}
}

// keyIdentity is the identity of an API key by ID while it may act (the
// MCP gateway's tokens die with their key).
func (d *daemon) keyIdentity(ctx context.Context, keyID string) (auth.Identity, error) {
	if err := d.authn.CheckKey(ctx, keyID); err != nil {
		return auth.Identity{}, err
	}
	rec, err := d.st.GetKeyByID(ctx, keyID)
	if err != nil {
		return auth.Identity{}, fmt.Errorf("read key: %w", err)
	}
	p, err := d.st.GetPrincipal(ctx, rec.PrincipalID)
	if err != nil {
		return auth.Identity{}, fmt.Errorf("read principal: %w", err)
	}
	scopes := make([]auth.Scope, len(rec.Scopes))
	for i, sc := range rec.Scopes {
		scopes[i] = auth.Scope(sc)
	}
	return auth.Identity{Principal: p, Key: rec, Scopes: scopes}, nil
}

// withMCP serves the gateway's virtual servers beside the API.
func (d *daemon) withMCP(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, mcpgw.PathPrefix) {
			d.mcp.ServeHTTP(w, r)
			return
		}
		switch {
		case r.URL.Path == mcpgw.OAuthCallbackPath:
			d.mcp.ServeOAuthCallback(w, r)
			return
		case r.URL.Path == mcpgw.TokenPath:
			d.mcp.ServeToken(w, r)
			return
		case r.URL.Path == mcpgw.AuthServerMetadataPath:
			d.mcp.ServeAuthServerMetadata(w, r)
			return
		case strings.HasPrefix(r.URL.Path, mcpgw.ResourceMetadataPrefix+mcpgw.PathPrefix):
			d.mcp.ServeResourceMetadata(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// mcpHooks tells the gateway of the API's /v1/mcp writes (the API is
// built before the gateway, which calls the API for builtin tools).
type mcpHooks struct{ d *daemon }

func (h mcpHooks) Invalidate() {
	if h.d.mcp != nil {
		h.d.mcp.Invalidate()
	}
}

// StartOAuth starts a remote connector's OAuth flow (api.MCPOAuth).
func (h mcpHooks) StartOAuth(ctx context.Context, connector, principal, owner string) (mcpgw.OAuthStart, error) {
	if h.d.mcp == nil {
		return mcpgw.OAuthStart{}, fmt.Errorf("%w: the MCP gateway is not running", mcpgw.ErrOAuthInvalid)
	}
	return h.d.mcp.StartOAuth(ctx, connector, principal, owner)
}

func (h mcpHooks) ForgetConnector(id string) {
	if h.d.mcp != nil {
		h.d.mcp.ForgetConnector(id)
	}
	if h.d.hosted != nil {
		h.d.hosted.Forget(context.Background(), id)
	}
}
