package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
)

func TestGrantFormatBasic(t *testing.T) {
	v, err := New(bytes.Repeat([]byte{3}, KeySize), &MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := v.Put("tok", "p1", []byte("ghp_0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.CreateGrant(Grant{SecretID: sec.ID, Sandbox: "sb", Hosts: []string{"git.example.com"}, Format: "digest"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown format: err = %v, want ErrInvalid", err)
	}
	if _, err := v.CreateGrant(Grant{SecretID: sec.ID, Middleware: "mw", Format: FormatBasic}); !errors.Is(err, ErrInvalid) {
		t.Errorf("format on a middleware grant: err = %v, want ErrInvalid", err)
	}
	g, err := v.CreateGrant(Grant{SecretID: sec.ID, Sandbox: "sb", Hosts: []string{"git.example.com"}, Format: FormatBasic})
	if err != nil {
		t.Fatal(err)
	}
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, c := range []struct {
		in, out string
		carries bool
	}{
		{"Basic " + enc("x-access-token:"+g.Placeholder), "Basic " + enc("x-access-token:ghp_0123456789abcdef"), true},
		{"basic " + base64.RawStdEncoding.EncodeToString([]byte("u:"+g.Placeholder)), "basic " + enc("u:ghp_0123456789abcdef"), true},
		{"Bearer " + g.Placeholder, "Bearer " + g.Placeholder, false},
		{"Basic " + enc("u:other"), "Basic " + enc("u:other"), false},
		{"Basic !!!notbase64", "Basic !!!notbase64", false},
		{"Basic", "Basic", false},
	} {
		if got := g.Carries(c.in); got != c.carries {
			t.Errorf("Carries(%q) = %v", c.in, got)
		}
		out, sent, shown := g.Substitute(c.in, []byte("ghp_0123456789abcdef"))
		if out != c.out {
			t.Errorf("Substitute(%q) = %q, want %q", c.in, out, c.out)
		}
		if c.carries && (sent == "" || shown == "") || !c.carries && (sent != "" || shown != "") {
			t.Errorf("Substitute(%q): sent %q shown %q", c.in, sent, shown)
		}
	}
	// A plain grant substitutes as before.
	p, err := v.CreateGrant(Grant{SecretID: sec.ID, Sandbox: "sb", Hosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, sent, _ := p.Substitute("Bearer "+p.Placeholder, []byte("ghp_0123456789abcdef")); out != "Bearer ghp_0123456789abcdef" || sent != "" {
		t.Errorf("plain Substitute = %q %q", out, sent)
	}
}

func TestRevokeManagedBy(t *testing.T) {
	v, err := New(bytes.Repeat([]byte{4}, KeySize), &MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := v.Put("tok", "p1", []byte("ghp_0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	mk := func(managedBy string) Grant {
		g, err := v.CreateGrant(Grant{SecretID: sec.ID, Sandbox: "sb", Hosts: []string{"git.example.com"}, Format: FormatBasic, ManagedBy: managedBy})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b, plain := mk("git-helper"), mk("git-helper"), mk("")
	if n, err := v.RevokeManagedBy("git-helper"); err != nil || n != 2 {
		t.Fatalf("RevokeManagedBy = %d, %v; want 2", n, err)
	}
	for _, c := range []struct {
		g       Grant
		revoked bool
	}{{a, true}, {b, true}, {plain, false}} {
		if g, _ := v.GetGrant(c.g.ID); g.Revoked != c.revoked {
			t.Errorf("grant %s (managed by %q): revoked %v, want %v", g.ID, g.ManagedBy, g.Revoked, c.revoked)
		}
	}
	if n, err := v.RevokeManagedBy("git-helper"); err != nil || n != 0 {
		t.Errorf("again: %d, %v", n, err)
	}
}
