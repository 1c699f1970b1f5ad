package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const testValue = "sk-test-THE-REAL-SECRET-0123456789abcdef"

func newMemVault(t *testing.T) *Vault {
	t.Helper()
	key := bytes.Repeat([]byte{7}, KeySize)
	v, err := New(key, &MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPutRotateRevoke(t *testing.T) {
	v := newMemVault(t)
	s1, err := v.Put("openai", "agent-1", []byte(testValue))
	if err != nil {
		t.Fatal(err)
	}
	if s1.Current != 1 || len(s1.Versions) != 1 || !strings.HasPrefix(s1.Versions[0].Fingerprint, "sha256:") {
		t.Fatalf("first put: %+v", s1)
	}
	val, ver, err := v.Current(s1.ID)
	if err != nil || ver != 1 || string(val) != testValue {
		t.Fatalf("Current = %q, %d, %v", val, ver, err)
	}
	// Same name, other owner: another secret.
	other, err := v.Put("openai", "agent-2", []byte("another-value-123"))
	if err != nil || other.ID == s1.ID {
		t.Fatalf("other owner: %+v %v", other, err)
	}
	// Rotation.
	s2, err := v.Put("openai", "agent-1", []byte(testValue+"-v2"))
	if err != nil {
		t.Fatal(err)
	}
	if s2.ID != s1.ID || s2.Current != 2 || len(s2.Versions) != 2 {
		t.Fatalf("rotate: %+v", s2)
	}
	if s2.Versions[0].Fingerprint == s2.Versions[1].Fingerprint {
		t.Fatal("versions share a fingerprint")
	}
	val, ver, _ = v.Current(s1.ID)
	if ver != 2 || string(val) != testValue+"-v2" {
		t.Fatalf("after rotation Current = %q, %d", val, ver)
	}
	old, err := v.ReadVersion(s1.ID, 1)
	if err != nil || string(old) != testValue {
		t.Fatalf("ReadVersion(1) = %q, %v", old, err)
	}
	// Metadata never carries the value.
	b, _ := json.Marshal(v.List("agent-1"))
	if bytes.Contains(b, []byte(testValue)) {
		t.Fatal("List leaks the value")
	}
	if l := v.List(""); len(l) != 2 {
		t.Fatalf("List all: %d", len(l))
	}
	// Revoke: no version is current; old versions are not used instead.
	if err := v.Revoke(s1.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Current(s1.ID); !errors.Is(err, ErrRevoked) {
		t.Fatalf("Current after revoke: %v", err)
	}
	if g, _ := v.Get(s1.ID); !g.Revoked {
		t.Fatal("Get: not revoked")
	}
	// A new Put rotates to a usable version.
	if _, err := v.Put("openai", "agent-1", []byte(testValue+"-v3")); err != nil {
		t.Fatal(err)
	}
	if val, ver, err := v.Current(s1.ID); err != nil || ver != 3 || string(val) != testValue+"-v3" {
		t.Fatalf("after re-put: %q %d %v", val, ver, err)
	}
	if err := v.Delete(s1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(s1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after delete: %v", err)
	}
}

func TestValueValidation(t *testing.T) {
	v := newMemVault(t)
	for _, bad := range []string{"short", "has\r\nnewline-123", "nul\x00byte-123", "x-" + PlaceholderPrefix + "abc"} {
		if _, err := v.Put("n", "o", []byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := v.Put("bad name", "o", []byte(testValue)); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad name accepted")
	}
}

func TestGrants(t *testing.T) {
	v := newMemVault(t)
	s, _ := v.Put("openai", "agent-1", []byte(testValue))
	for _, bad := range []Grant{
		{SecretID: s.ID, Hosts: []string{"api.openai.com"}},                                        // no target
		{SecretID: s.ID, Sandbox: "sb-1", Principal: "agent-1", Hosts: []string{"api.openai.com"}}, // both
		{SecretID: s.ID, Sandbox: "sb-1"},                                                          // no hosts
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"*.com"}},
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"*"}},
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"10.0.0.1"}},
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"api.openai.com"}, Header: "Host"},
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"api.openai.com"}, Header: "Bad Header"},
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"api.openai.com"}, PathPrefix: "/v1/../x"},
		{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"api.openai.com"}, EnvName: "1BAD"},
	} {
		if _, err := v.CreateGrant(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateGrant(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := v.CreateGrant(Grant{SecretID: "nope", Sandbox: "sb-1", Hosts: []string{"a.example.com"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("grant of unknown secret: %v", err)
	}

	g1, err := v.CreateGrant(Grant{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"API.OpenAI.com."}, EnvName: "OPENAI_API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if g1.Header != "Authorization" || g1.Hosts[0] != "api.openai.com" {
		t.Fatalf("normalised grant: %+v", g1)
	}
	if !strings.HasPrefix(g1.Placeholder, PlaceholderPrefix) || len(g1.Placeholder) != len(PlaceholderPrefix)+32 {
		t.Fatalf("placeholder %q", g1.Placeholder)
	}
	g2, err := v.CreateGrant(Grant{SecretID: s.ID, Principal: "agent-1", Hosts: []string{"*.example.com"}, Header: "x-api-key", PathPrefix: "/v1", EnvName: "EXAMPLE_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Header != "X-Api-Key" || g2.Placeholder == g1.Placeholder {
		t.Fatalf("g2: %+v", g2)
	}
	// The principal's grant reaches all its sandboxes, the sandbox grant one.
	if got := v.GrantsFor("sb-1", "agent-1"); len(got) != 2 || got[0].ID != g2.ID || got[1].ID != g1.ID {
		t.Fatalf("GrantsFor(sb-1) = %+v", got)
	}
	if got := v.GrantsFor("sb-2", "agent-1"); len(got) != 1 || got[0].ID != g2.ID {
		t.Fatalf("GrantsFor(sb-2) = %+v", got)
	}
	if got := v.GrantsFor("sb-2", "agent-2"); len(got) != 0 {
		t.Fatalf("GrantsFor(other) = %+v", got)
	}
	if got := v.GrantsFor("", ""); len(got) != 0 {
		t.Fatalf("empty ids match: %+v", got)
	}
	env := v.EnvFor("sb-1", "agent-1")
	if env["OPENAI_API_KEY"] != g1.Placeholder || env["EXAMPLE_KEY"] != g2.Placeholder || len(env) != 2 {
		t.Fatalf("EnvFor = %v", env)
	}
	// Host and path coverage.
	for _, c := range []struct {
		g    Grant
		host string
		path string
		want bool
	}{
		{g1, "api.openai.com", "/v1/chat", true},
		{g1, "API.OPENAI.COM.", "/", true},
		{g1, "x.api.openai.com", "/", false},
		{g2, "a.example.com", "/v1", true},
		{g2, "a.b.example.com", "/v1/x?q=1", true},
		{g2, "example.com", "/v1", false},
		{g2, "a.example.com", "/v10", false},
		{g2, "a.example.com", "/v2", false},
		{g2, "a.example.com", "/v1/../admin", false},
		{g2, "a.example.com", "/v1/%2e%2e/admin", false},
		{g2, "a.example.com", "/v1//x", false},
	} {
		if got := c.g.CoversHost(c.host) && c.g.CoversPath(c.path); got != c.want {
			t.Errorf("grant %v covers %s%s = %v, want %v", c.g.Hosts, c.host, c.path, got, c.want)
		}
	}
	// Revocation.
	if err := v.RevokeGrant(g1.ID); err != nil {
		t.Fatal(err)
	}
	if got := v.GrantsFor("sb-1", "agent-1"); len(got) != 1 || got[0].ID != g2.ID {
		t.Fatalf("after revoke: %+v", got)
	}
	if g, _ := v.GetGrant(g1.ID); !g.Revoked {
		t.Fatal("GetGrant: not revoked")
	}
	// Purging a sandbox drops its grants only.
	g3, _ := v.CreateGrant(Grant{SecretID: s.ID, Sandbox: "sb-3", Hosts: []string{"api.openai.com"}})
	if err := v.PurgeSandbox("sb-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.GetGrant(g3.ID); !errors.Is(err, ErrNotFound) {
		t.Fatal("PurgeSandbox kept the grant")
	}
	if len(v.ListGrants(s.ID)) != 2 {
		t.Fatalf("ListGrants: %+v", v.ListGrants(s.ID))
	}
	// Deleting the secret removes its grants.
	v.Delete(s.ID)
	if len(v.ListGrants("")) != 0 || len(v.EnvFor("sb-1", "agent-1")) != 0 {
		t.Fatal("grants survive their secret")
	}
}

func TestFileStore(t *testing.T) {
	dir := t.TempDir()
	v, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := v.Put("openai", "agent-1", []byte(testValue))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Put("openai", "agent-1", []byte(testValue+"-rotated")); err != nil {
		t.Fatal(err)
	}
	s2, _ := v.Put("other", "agent-1", []byte("second-secret-value"))
	g, err := v.CreateGrant(Grant{SecretID: s.ID, Sandbox: "sb-1", Hosts: []string{"api.openai.com"}, EnvName: "K"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{KeyFile, DataFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", f, fi.Mode())
		}
	}
	// (g) the data file never holds a value, raw or in the usual encodings.
	raw, err := os.ReadFile(filepath.Join(dir, DataFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, val := range []string{testValue, testValue + "-rotated", "second-secret-value"} {
		for _, form := range []string{val, base64.StdEncoding.EncodeToString([]byte(val)), base64.RawStdEncoding.EncodeToString([]byte(val))} {
			if bytes.Contains(raw, []byte(form)) {
				t.Fatalf("secrets file contains a value form %q", form)
			}
		}
	}
	// Reopen: everything is back.
	v2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if val, ver, err := v2.Current(s.ID); err != nil || ver != 2 || string(val) != testValue+"-rotated" {
		t.Fatalf("reopened Current = %q %d %v", val, ver, err)
	}
	if env := v2.EnvFor("sb-1", ""); env["K"] != g.Placeholder {
		t.Fatalf("reopened EnvFor = %v", env)
	}

	// (g) a wrong key is refused at open...
	wrong := bytes.Repeat([]byte{1}, KeySize)
	if _, err := New(wrong, NewFileStore(filepath.Join(dir, DataFile))); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("wrong key: %v", err)
	}
	// ...and, without the key check, fails every decryption.
	var st State
	json.Unmarshal(raw, &st)
	st.KeyCheck = nil
	noCheck := &MemStore{}
	noCheck.Save(&st)
	vw, err := New(wrong, noCheck)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := vw.Current(s.ID); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("wrong key Current: %v", err)
	}

	// (g) ciphertexts swapped between rows (or versions) do not decrypt.
	key, _ := LoadOrCreateKey(filepath.Join(dir, KeyFile))
	json.Unmarshal(raw, &st)
	a, b := &st.Secrets[0], &st.Secrets[1]
	if a.ID != s.ID || b.ID != s2.ID {
		t.Fatal("unexpected order")
	}
	swap := func(x, y *SealedVersion) {
		x.Nonce, y.Nonce = y.Nonce, x.Nonce
		x.Ciphertext, y.Ciphertext = y.Ciphertext, x.Ciphertext
	}
	swap(&a.Versions[1], &b.Versions[0])
	swap(&a.Versions[0], &a.Versions[0]) // no-op: version 1 stays valid
	ms := &MemStore{}
	ms.Save(&st)
	vs, err := New(key, ms)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := vs.Current(s.ID); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("swapped row: %v", err)
	}
	if _, _, err := vs.Current(s2.ID); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("swapped row: %v", err)
	}
	if v1, err := vs.ReadVersion(s.ID, 1); err != nil || string(v1) != testValue {
		t.Fatalf("untouched version: %q %v", v1, err)
	}
	// Between versions of one secret too.
	json.Unmarshal(raw, &st)
	swap(&st.Secrets[0].Versions[0], &st.Secrets[0].Versions[1])
	ms.Save(&st)
	vs, _ = New(key, ms)
	if _, err := vs.ReadVersion(s.ID, 1); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("swapped versions: %v", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", KeyFile)
	k1, err := LoadOrCreateKey(p)
	if err != nil || len(k1) != KeySize {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(p)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatal("key not stable")
	}
	os.Chmod(p, 0o644)
	if _, err := LoadOrCreateKey(p); err == nil {
		t.Fatal("world-readable key accepted")
	}
	os.WriteFile(p, []byte("abcd\n"), 0o600)
	os.Chmod(p, 0o600)
	if _, err := LoadOrCreateKey(p); err == nil {
		t.Fatal("short key accepted")
	}
}

type failStore struct{ MemStore }

func (f *failStore) Save(*State) error { return errors.New("disk full") }

func TestSaveFailureLeavesStateUnchanged(t *testing.T) {
	v, err := New(bytes.Repeat([]byte{2}, KeySize), &failStore{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Put("n", "o", []byte(testValue)); err == nil {
		t.Fatal("Put succeeded on a failing store")
	}
	if len(v.List("")) != 0 {
		t.Fatal("failed Put took effect")
	}
}

func TestConcurrent(t *testing.T) {
	v, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.Put("k", "o", []byte(testValue))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				switch (i + j) % 4 {
				case 0:
					v.Put("k", "o", []byte(testValue))
				case 1:
					v.CreateGrant(Grant{SecretID: s.ID, Sandbox: "sb", Hosts: []string{"a.example.com"}})
				case 2:
					v.GrantsFor("sb", "o")
				case 3:
					v.Current(s.ID)
				}
			}
		}()
	}
	wg.Wait()
	got, _ := v.Get(s.ID)
	if got.Current < 2 {
		t.Fatalf("versions: %d", got.Current)
	}
}
