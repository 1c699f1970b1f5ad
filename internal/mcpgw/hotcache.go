package mcpgw

import (
	"context"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// The hot path's store reads (a grant, a connector, a credential
// binding) are cached: every change made through the API reaches the
// gateway as Invalidate or ForgetConnector, which bump g.gen and so empty
// the cache at once; an entry also lasts at most SyncInterval (2 s by
// default), the bound on how late a change made around the API (a
// principal removed) is seen, the same as a virtual server's own sync.
// Errors are not cached.

const hotCacheMax = 10000

type hotEntry struct {
	v  any
	at time.Time
}

type hotCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]hotEntry
}

func (g *Gateway) hotGet(key string) (any, bool) {
	gen, now := g.gen.Load(), g.cfg.Now()
	g.hot.mu.Lock()
	defer g.hot.mu.Unlock()
	if g.hot.gen != gen {
		return nil, false
	}
	e, ok := g.hot.m[key]
	if !ok || now.Sub(e.at) >= g.cfg.SyncInterval || now.Before(e.at) {
		return nil, false
	}
	return e.v, true
}

// hotPut caches v for key, read under generation gen (read before the
// store was): a value read before an Invalidate is never kept after it.
func (g *Gateway) hotPut(key string, gen uint64, v any) {
	now := g.cfg.Now()
	g.hot.mu.Lock()
	defer g.hot.mu.Unlock()
	if g.hot.gen != gen || g.hot.m == nil || len(g.hot.m) >= hotCacheMax {
		if gen != g.gen.Load() {
			return
		}
		g.hot.gen, g.hot.m = gen, map[string]hotEntry{}
	}
	g.hot.m[key] = hotEntry{v: v, at: now}
}

// cachedGranted is granted, cached.
func (g *Gateway) cachedGranted(ctx context.Context, server, principal string) (bool, error) {
	key := "g\x00" + server + "\x00" + principal
	if v, ok := g.hotGet(key); ok {
		return v.(bool), nil
	}
	gen := g.gen.Load()
	ok, err := g.granted(ctx, server, principal)
	if err == nil {
		g.hotPut(key, gen, ok)
	}
	return ok, err
}

// connector is GetConnector, cached.
func (g *Gateway) connector(ctx context.Context, id string) (store.MCPConnector, error) {
	key := "c\x00" + id
	if v, ok := g.hotGet(key); ok {
		return v.(store.MCPConnector), nil
	}
	gen := g.gen.Load()
	c, err := g.cfg.Store.GetConnector(ctx, id)
	if err == nil {
		g.hotPut(key, gen, c)
	}
	return c, err
}

// cachedCredential is credentialFor, cached per connector version and
// principal.
func (g *Gateway) cachedCredential(ctx context.Context, conn store.MCPConnector, principal string) (binding, error) {
	key := "b\x00" + conn.ID + "\x00" + conn.UpdatedAt.String() + "\x00" + principal
	if v, ok := g.hotGet(key); ok {
		return v.(binding), nil
	}
	gen := g.gen.Load()
	b, err := g.credentialFor(ctx, conn, principal)
	if err == nil {
		g.hotPut(key, gen, b)
	}
	return b, err
}
