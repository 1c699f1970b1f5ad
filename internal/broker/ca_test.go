package broker

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/secrets"
)

func parsePEMCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", b)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCA(t *testing.T) {
	dir := t.TempDir()
	v, _ := secrets.New(bytes.Repeat([]byte{1}, secrets.KeySize), &secrets.MemStore{})
	roots := filepath.Join(dir, "roots.pem")
	os.WriteFile(roots, []byte("-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----"), 0o644)
	b, err := New(Config{Credentials: v, StateDir: filepath.Join(dir, "ca"), SystemRoots: roots})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := b.CA("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	ca := parsePEMCert(t, p1)
	if !ca.IsCA || ca.MaxPathLen != 0 || !ca.MaxPathLenZero || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA constraints: IsCA %v MaxPathLen %d zero %v usage %v", ca.IsCA, ca.MaxPathLen, ca.MaxPathLenZero, ca.KeyUsage)
	}
	if pk, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || pk.Curve != elliptic.P256() {
		t.Fatalf("CA key %T", ca.PublicKey)
	}
	if life := ca.NotAfter.Sub(time.Now()); life < 29*24*time.Hour || life > 31*24*time.Hour {
		t.Fatalf("CA lifetime %v", life)
	}
	if len(ca.ExcludedIPRanges) != 2 {
		t.Fatalf("IP exclusions %v", ca.ExcludedIPRanges)
	}
	// Each sandbox has its own CA; the same one on every call.
	p2, _ := b.CA("sb-2")
	if bytes.Equal(p1, p2) {
		t.Fatal("sandboxes share a CA")
	}
	if again, _ := b.CA("sb-1"); !bytes.Equal(again, p1) {
		t.Fatal("CA changed")
	}
	// Persisted, mode 0600, and reloaded by a new broker.
	fi, err := os.Stat(filepath.Join(dir, "ca", "sb-1.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA file: %v %v", fi, err)
	}
	b2, _ := New(Config{Credentials: v, StateDir: filepath.Join(dir, "ca"), SystemRoots: roots})
	if p, _ := b2.CA("sb-1"); !bytes.Equal(p, p1) {
		t.Fatal("CA not reloaded after restart")
	}
	// Leaves verify for their name only, under that sandbox's CA only.
	sca, _ := b2.ca("sb-1")
	leaf, err := sca.leaf("api.example.com", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := sca.leaf("api.example.com", time.Now()); again != leaf {
		t.Fatal("leaf not cached")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: pool}); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: pool}); err == nil {
		t.Fatal("leaf verifies for another name")
	}
	other := x509.NewCertPool()
	other.AddCert(parsePEMCert(t, p2))
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: other}); err == nil {
		t.Fatal("leaf verifies under another sandbox's CA")
	}
	// Trust bundle: system roots, then the CA.
	tb, err := b2.TrustBundle("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(tb, []byte("-----BEGIN CERTIFICATE-----\nSYSTEM")) || !bytes.HasSuffix(tb, p1) {
		t.Fatalf("trust bundle:\n%s", tb)
	}
	// The real system bundle by default.
	if _, err := os.Stat(systemRootFiles[0]); err == nil {
		b3, _ := New(Config{Credentials: v})
		tb, err := b3.TrustBundle("sb-1")
		if err != nil || !x509.NewCertPool().AppendCertsFromPEM(tb) || len(tb) < 10000 {
			t.Fatalf("default trust bundle: %d bytes, %v", len(tb), err)
		}
	}
	// Forget removes it; the next call makes a new one.
	if err := b2.Forget("sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca", "sb-1.pem")); !os.IsNotExist(err) {
		t.Fatal("CA file kept")
	}
	if p, _ := b2.CA("sb-1"); bytes.Equal(p, p1) {
		t.Fatal("forgotten CA came back")
	}
	// Bad ids never reach the file system.
	for _, id := range []string{"", "../x", "a/b", ".hidden"} {
		if _, err := b2.CA(id); err == nil {
			t.Errorf("CA(%q) accepted", id)
		}
	}
	// An expired CA is replaced.
	b4, _ := New(Config{Credentials: v, StateDir: filepath.Join(dir, "ca"), Now: func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }})
	if p, _ := b4.CA("sb-2"); bytes.Equal(p, p2) {
		t.Fatal("expired CA reused")
	}
}
