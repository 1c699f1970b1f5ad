package integration

import (
	"os"
	"path/filepath"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestSecBuildCachePerPrincipal (issue 15, item 14): the build cache is
// scoped to the principal. B building A's Dockerfile with the right guess
// of A's build argument gets no cache hit (so it learns nothing), while A
// (and B, on its own builds) still rebuild from the cache.
func TestSecBuildCachePerPrincipal(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)
	principal := func(name string) *warden.Client {
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "user", Name: name})
		if err != nil {
			t.Fatalf("create principal: %v", err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: name, Scopes: []string{"templates:write", "templates:read"}})
		if err != nil {
			t.Fatalf("create key: %v", err)
		}
		return d.client(t, k.Key)
	}
	a, b := principal("tenant-a"), principal("tenant-b")

	const dockerfile = "FROM base\nUSER root\nARG TOKEN\nRUN echo \"$TOKEN\" | sha256sum > /token.sum\n"
	const runLine = 4
	// build returns the Dockerfile lines reported as cached.
	build := func(c *warden.Client, name, token string) (cached []int, res warden.BuildResult) {
		t.Helper()
		dir := writeContext(t, map[string]string{"Dockerfile": dockerfile})
		res, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: name, Args: map[string]string{"TOKEN": token}}, tarDir(t, dir),
			func(ev warden.TemplateEvent) {
				if ev.Type == "cached" {
					cached = append(cached, ev.Line)
				}
			})
		if err != nil {
			t.Fatalf("build %s: %v", name, err)
		}
		return cached, res
	}
	if cached, res := build(a, "tenant-a-app:1", "s3cret-A"); len(cached) != 0 || res.Executed != 1 {
		t.Fatalf("A's first build: cached lines %v, %d executed; want nothing cached, 1 run", cached, res.Executed)
	}
	// A rebuilding is served from the cache: the cache still works.
	if cached, res := build(a, "tenant-a-app:2", "s3cret-A"); len(cached) != 1 || cached[0] != runLine || res.CacheHits != 1 || res.Executed != 0 {
		t.Fatalf("A's rebuild: cached lines %v, %d hits, %d executed; want line %d cached and nothing run", cached, res.CacheHits, res.Executed, runLine)
	}
	// B, guessing A's argument right, gets no hit: the RUN step runs.
	if cached, res := build(b, "tenant-b-app:1", "s3cret-A"); len(cached) != 0 || res.CacheHits != 0 || res.Executed != 1 {
		t.Fatalf("B's build with A's argument guessed right: cached lines %v, %d hits, %d executed; want no hit (the cache confirms A's argument)", cached, res.CacheHits, res.Executed)
	}
	// B's own rebuild hits B's own entry.
	if cached, res := build(b, "tenant-b-app:2", "s3cret-A"); len(cached) != 1 || res.CacheHits != 1 {
		t.Fatalf("B's rebuild: cached lines %v, %d hits; want its own entry to hit", cached, res.CacheHits)
	}
	// The scopes' key is the daemon's own, private to root.
	fi, err := os.Stat(filepath.Join(state, "templates", "build-cache.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("build cache key file: %v, mode %v; want it present with mode 0600", err, fi)
	}
}
