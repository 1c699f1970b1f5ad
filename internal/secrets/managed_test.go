package secrets

import (
	"errors"
	"testing"
)

// TestSyncSandboxGrants: the managed grants of a sandbox follow the wanted
// set (kept with their placeholder when unchanged, revoked when dropped or
// changed, made when new), grants made through the API stay, and a bad
// wanted grant changes nothing.
func TestSyncSandboxGrants(t *testing.T) {
	v := newMemVault(t)
	gh, err := v.Put("github", "alice", []byte(testValue))
	if err != nil {
		t.Fatal(err)
	}
	oa, err := v.Put("openai", "alice", []byte(testValue+"x"))
	if err != nil {
		t.Fatal(err)
	}
	byHand, err := v.CreateGrant(Grant{SecretID: oa.ID, Sandbox: "sb-1", Hosts: []string{"api.openai.com"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Grant{
		{SecretID: gh.ID, Hosts: []string{"API.github.com"}, EnvName: "GITHUB_TOKEN"},
		{SecretID: oa.ID, Hosts: []string{"api.openai.com"}, Header: "x-api-key", EnvName: "OPENAI_KEY"},
	}
	first, err := v.SyncSandboxGrants("sb-1", "agent:triage", want)
	if err != nil || len(first) != 2 || first[0].Hosts[0] != "api.github.com" || first[0].ManagedBy != "agent:triage" ||
		first[1].Header != "X-Api-Key" || first[0].Placeholder == "" {
		t.Fatalf("first sync = %+v, %v", first, err)
	}
	if env := v.EnvFor("sb-1", ""); env["GITHUB_TOKEN"] != first[0].Placeholder || env["OPENAI_KEY"] != first[1].Placeholder {
		t.Fatalf("env = %v", env)
	}
	// The same set again keeps both grants and their placeholders.
	again, err := v.SyncSandboxGrants("sb-1", "agent:triage", want)
	if err != nil || again[0].ID != first[0].ID || again[1].Placeholder != first[1].Placeholder {
		t.Fatalf("second sync = %+v, %v", again, err)
	}
	// Dropping one and changing the other's hosts: the first is revoked,
	// the second replaced; the grant made by hand stays.
	next, err := v.SyncSandboxGrants("sb-1", "agent:triage", []Grant{{SecretID: gh.ID, Hosts: []string{"uploads.github.com"}}})
	if err != nil || len(next) != 1 || next[0].ID == first[0].ID {
		t.Fatalf("third sync = %+v, %v", next, err)
	}
	live := map[string]bool{}
	for _, g := range v.GrantsFor("sb-1", "") {
		live[g.ID] = true
	}
	if live[first[0].ID] || live[first[1].ID] || !live[next[0].ID] || !live[byHand.ID] || len(live) != 2 {
		t.Fatalf("live grants = %v", live)
	}
	// Another agent's managed grants on the same sandbox are its own.
	if _, err := v.SyncSandboxGrants("sb-1", "agent:other", nil); err != nil {
		t.Fatal(err)
	}
	if len(v.GrantsFor("sb-1", "")) != 2 {
		t.Fatal("another manager's sync revoked grants")
	}
	// A bad wanted grant, or an unknown secret, changes nothing.
	if _, err := v.SyncSandboxGrants("sb-1", "agent:triage", []Grant{{SecretID: gh.ID}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no hosts: %v", err)
	}
	if _, err := v.SyncSandboxGrants("sb-1", "agent:triage", []Grant{{SecretID: "sec-nope", Hosts: []string{"a.example.com"}}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown secret: %v", err)
	}
	if !live[next[0].ID] || len(v.GrantsFor("sb-1", "")) != 2 {
		t.Fatal("a failed sync changed the grants")
	}
	// The sandbox's end purges them all.
	if err := v.PurgeSandbox("sb-1"); err != nil || len(v.GrantsFor("sb-1", "")) != 0 {
		t.Fatalf("purge: %v", err)
	}
}
