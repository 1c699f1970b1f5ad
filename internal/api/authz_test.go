package api

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// keyWith creates an agent principal with one key holding scopes and
// returns a client using it.
func keyWith(t *testing.T, name string, scopes []string) *warden.Client {
	t.Helper()
	_, key, err := newAgent(context.Background(), name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	return client(key)
}

// TestOwnership: agent B can neither see nor touch agent A's sandbox; to B
// it does not exist.
func TestOwnership(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	b, id := env.b, env.sbA

	page, err := b.ListSandboxes(ctx, warden.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range page.Sandboxes {
		if sb.Owner != env.bID {
			t.Errorf("B lists %s owned by %s", sb.ID, sb.Owner)
		}
	}
	_, err = b.GetSandbox(ctx, id)
	apiErr(t, err, 404, warden.CodeNotFound)
	var foreign, missing *warden.Error
	errors.As(err, &foreign)
	_, err = b.GetSandbox(ctx, "sb-doesnotexist")
	errors.As(err, &missing)
	if foreign.Message != "sandbox "+id+" not found" || missing.Message != "sandbox sb-doesnotexist not found" {
		t.Errorf("foreign and missing sandboxes differ: %q / %q", foreign.Message, missing.Message)
	}
	_, err = b.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = b.ReadFile(ctx, id, "/etc/hostname", warden.ReadOptions{})
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = b.WriteFile(ctx, id, "/tmp/x", strings.NewReader("x"), warden.WriteOptions{})
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = b.List(ctx, id, "/", 1)
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = b.Processes(ctx, id)
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = b.SetTimeout(ctx, id, 60)
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = b.Usage(ctx, id)
	apiErr(t, err, 404, warden.CodeNotFound)
	apiErr(t, b.KillSandbox(ctx, id), 404, warden.CodeNotFound)

	sb, err := env.a.GetSandbox(ctx, id)
	if err != nil || sb.State != warden.StateRunning {
		t.Fatalf("A's sandbox after B's attempts: %+v %v", sb, err)
	}

	// sandboxes:all and admin see everyone's.
	all := keyWith(t, "reader-all", []string{"sandboxes:read", "sandboxes:all"})
	if _, err := all.GetSandbox(ctx, id); err != nil {
		t.Errorf("sandboxes:all: %v", err)
	}
	if _, err := env.admin.GetSandbox(ctx, id); err != nil {
		t.Errorf("admin: %v", err)
	}
	page, err = all.ListSandboxes(ctx, warden.ListOptions{Limit: 1000})
	if err != nil || !slices.Contains(sandboxIDs(page.Sandboxes), id) {
		t.Errorf("sandboxes:all list lacks %s: %v", id, err)
	}
}

func TestScopes(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	ro := keyWith(t, "read-only", []string{"sandboxes:read"})
	_, err := ro.CreateSandbox(ctx, warden.CreateSandboxRequest{})
	apiErr(t, err, 403, warden.CodeForbidden)
	if !strings.Contains(err.Error(), "missing scope sandboxes:create") {
		t.Errorf("403 does not name the scope: %v", err)
	}
	_, err = ro.Exec(ctx, env.sbA, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
	apiErr(t, err, 403, warden.CodeForbidden)
	_, err = ro.ListAudit(ctx, warden.AuditQuery{})
	apiErr(t, err, 403, warden.CodeForbidden)
	_, err = env.a.CreateKey(ctx, warden.CreateKeyRequest{Scopes: []string{"admin"}})
	apiErr(t, err, 403, warden.CodeForbidden)
	_, err = env.a.ListPrincipals(ctx)
	apiErr(t, err, 403, warden.CodeForbidden)
	// Any valid key may ask who it is.
	me, err := ro.Whoami(ctx)
	if err != nil || me.Principal.Kind != warden.KindAgent || !slices.Equal(me.Key.Scopes, []string{"sandboxes:read"}) || me.Key.RevokedAt != nil {
		t.Fatalf("whoami = %+v %v", me, err)
	}
}

func TestKeys(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	admin := env.admin
	p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindUser, Name: "someone"})
	if err != nil {
		t.Fatal(err)
	}
	me, err := admin.Whoami(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.CreatedBy != me.Principal.ID || !strings.HasPrefix(p.ID, "pr-") {
		t.Errorf("principal = %+v", p)
	}
	ps, err := admin.ListPrincipals(ctx)
	if err != nil || !slices.ContainsFunc(ps, func(x warden.Principal) bool { return x.ID == p.ID }) {
		t.Fatalf("principals lack %s: %v", p.ID, err)
	}
	k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "k", Scopes: []string{"sandboxes:read", "sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Key, "wdn_"+k.APIKey.ID+"_") || k.APIKey.Prefix != "wdn_"+k.APIKey.ID || k.APIKey.PrincipalID != p.ID {
		t.Fatalf("created key = %+v", k)
	}
	c := client(k.Key)
	if _, err := c.ListSandboxes(ctx, warden.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	keys, err := admin.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(keys, func(x warden.APIKey) bool { return x.ID == k.APIKey.ID })
	if i < 0 || keys[i].RevokedAt != nil {
		t.Fatalf("listed keys lack %s", k.APIKey.ID)
	}
	if raw := getRaw(t, env.adminKey, "/v1/keys"); strings.Contains(raw, k.Key[len("wdn_")+9:]) || strings.Contains(raw, "hash") {
		t.Fatal("key list leaks the secret")
	}

	// Revocation takes effect on the next request.
	if err := admin.RevokeKey(ctx, k.APIKey.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.ListSandboxes(ctx, warden.ListOptions{})
	apiErr(t, err, 401, warden.CodeUnauthenticated)
	keys, _ = admin.ListKeys(ctx)
	i = slices.IndexFunc(keys, func(x warden.APIKey) bool { return x.ID == k.APIKey.ID })
	if i < 0 || keys[i].RevokedAt == nil {
		t.Fatal("revoked key not marked revoked")
	}
	apiErr(t, admin.RevokeKey(ctx, "zzzzzzzz"), 404, warden.CodeNotFound)
	_, err = admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: "pr-nobody", Scopes: []string{"admin"}})
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = admin.CreateKey(ctx, warden.CreateKeyRequest{Scopes: []string{"root"}})
	apiErr(t, err, 422, warden.CodeValidationFailed)
	_, err = admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "robot", Name: "x"})
	apiErr(t, err, 422, warden.CodeValidationFailed)

	// Forged and malformed keys.
	for _, key := range []string{"", "wdn_abcdefgh_" + strings.Repeat("A", 32), "not-a-key", k.Key[:len(k.Key)-1] + "x"} {
		_, err := client(key).Whoami(ctx)
		apiErr(t, err, 401, warden.CodeUnauthenticated)
	}
}
