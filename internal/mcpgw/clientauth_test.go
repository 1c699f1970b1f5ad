package mcpgw

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
)

// The audience-bound tokens of clientauth.go: a token verifies only at its
// own server's URL, not after it expires, not when any byte of it
// changed, and not once its key is gone.
func TestMCPTokenVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	keyGone := false
	ident := auth.Identity{Principal: store.Principal{ID: "p1"}, Key: store.APIKey{ID: "k1"}}
	g, err := New(Config{Store: newMemStore(), Auth: fakeAuth{}, PublicURL: "http://warden.test:7070",
		TokenKey: []byte(strings.Repeat("k", 32)), Now: func() time.Time { return now },
		KeyIdentity: func(_ context.Context, id string) (auth.Identity, error) {
			if id != "k1" || keyGone {
				return auth.Identity{}, auth.ErrRevoked
			}
			return ident, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok := g.signToken(tokenClaims{Sub: "p1", Kid: "k1", Aud: g.serverURL("s1"), Iat: now.Unix(), Exp: now.Add(time.Hour).Unix()})
	if got, err := g.verifyToken(ctx, tok, "s1"); err != nil || got.Principal.ID != "p1" {
		t.Fatalf("valid token: %v %+v", err, got)
	}
	if _, err := g.verifyToken(ctx, tok, "s2"); !errors.Is(err, errTokenAudience) {
		t.Fatalf("another server: %v", err)
	}
	for i := len(TokenPrefix); i < len(tok); i++ {
		b := []byte(tok)
		b[i] ^= 1
		if _, err := g.verifyToken(ctx, string(b), "s1"); err == nil {
			t.Fatalf("a token with byte %d changed verified", i)
		}
	}
	forged := g.signToken(tokenClaims{Sub: "p2", Kid: "k1", Aud: g.serverURL("s1"), Exp: now.Add(time.Hour).Unix()})
	if _, err := g.verifyToken(ctx, forged, "s1"); !errors.Is(err, errTokenInvalid) {
		t.Fatalf("subject other than the key's principal: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := g.verifyToken(ctx, tok, "s1"); !errors.Is(err, errTokenInvalid) {
		t.Fatalf("expired: %v", err)
	}
	now = now.Add(-time.Minute)
	keyGone = true
	if _, err := g.verifyToken(ctx, tok, "s1"); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("revoked key: %v", err)
	}
	// Without a key no token verifies.
	g.cfg.TokenKey = nil
	keyGone = false
	if _, err := g.verifyToken(ctx, tok, "s1"); err == nil {
		t.Fatal("verified without a signing key")
	}
}
