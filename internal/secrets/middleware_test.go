package secrets

import (
	"errors"
	"slices"
	"testing"
)

// TestMiddlewareGrants: a grant to a middleware lets exactly that middleware
// read the secret by name (the newest grant wins); it is none of a
// sandbox's or principal's grants; revoking, purging or a revoked secret
// ends it; sandbox-only fields are refused.
func TestMiddlewareGrants(t *testing.T) {
	v := newMemVault(t)
	a, err := v.Put("api_token", "alice", []byte("alice-token-value"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Put("api_token", "bob", []byte("bob-token-value"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.ForMiddleware("hook", "api_token"); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("before a grant: %v", err)
	}
	for _, bad := range []Grant{
		{SecretID: a.ID, Middleware: "hook", Sandbox: "sb-1", Hosts: []string{"x.example"}},
		{SecretID: a.ID, Middleware: "hook", Header: "X-Key"},
		{SecretID: a.ID, Middleware: "hook", EnvName: "KEY"},
	} {
		if _, err := v.CreateGrant(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("grant %+v: %v, want invalid", bad, err)
		}
	}
	ga, err := v.CreateGrant(Grant{SecretID: a.ID, Middleware: "hook"})
	if err != nil {
		t.Fatal(err)
	}
	val, hosts, err := v.ForMiddleware("hook", "api_token")
	if err != nil || string(val) != "alice-token-value" || len(hosts) != 0 {
		t.Fatalf("granted: %q %v %v", val, hosts, err)
	}
	if _, _, err := v.ForMiddleware("other", "api_token"); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("another middleware: %v", err)
	}
	if _, _, err := v.ForMiddleware("hook", "other_name"); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("another name: %v", err)
	}
	if len(v.GrantsFor("", "")) != 0 {
		t.Fatal("a middleware grant is among a sandbox's grants")
	}
	// The newest grant of a name wins; its hosts come with it.
	if _, err := v.CreateGrant(Grant{SecretID: b.ID, Middleware: "hook", Hosts: []string{"API.example.com."}}); err != nil {
		t.Fatal(err)
	}
	val, hosts, err = v.ForMiddleware("hook", "api_token")
	if err != nil || string(val) != "bob-token-value" || !slices.Equal(hosts, []string{"api.example.com"}) {
		t.Fatalf("newest grant: %q %v %v", val, hosts, err)
	}
	if err := v.Revoke(b.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.ForMiddleware("hook", "api_token"); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked secret: %v", err)
	}
	if err := v.Delete(b.ID); err != nil {
		t.Fatal(err)
	}
	if val, _, err := v.ForMiddleware("hook", "api_token"); err != nil || string(val) != "alice-token-value" {
		t.Fatalf("after deleting the newer secret: %q %v", val, err)
	}
	if err := v.RevokeGrant(ga.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.ForMiddleware("hook", "api_token"); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("revoked grant: %v", err)
	}
	if _, err := v.CreateGrant(Grant{SecretID: a.ID, Middleware: "hook"}); err != nil {
		t.Fatal(err)
	}
	if err := v.PurgeMiddleware("hook"); err != nil {
		t.Fatal(err)
	}
	if len(v.ListGrants(a.ID)) != 0 {
		t.Fatalf("grants left after the purge: %+v", v.ListGrants(a.ID))
	}
}
