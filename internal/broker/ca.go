package broker

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/safefile"
)

// Per-sandbox certificate authorities. Each sandbox gets its own CA (ECDSA
// P-256, DefaultCALifetime), trusted only inside that sandbox; the broker
// mints leaf certificates from it for the granted names the sandbox
// connects to. The CA may only sign end-entity server certificates
// (MaxPathLen 0, extended key usage serverAuth) and never for IP addresses
// (name constraints exclude every address). With Config.StateDir set, the
// CA survives daemon restarts (sandboxes keep running across them and keep
// trusting the CA written into them).

// Defaults.
const (
	DefaultCALifetime = 30 * 24 * time.Hour
	leafLifetime      = 7 * 24 * time.Hour
	leafRenewBefore   = time.Hour
	clockSkew         = time.Hour
	maxLeaves         = 1024 // per sandbox; the cache is dropped when full
)

// systemRootFiles are where Linux distributions keep the system's PEM
// bundle (the list crypto/x509 uses).
var systemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // OpenSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

type sandboxCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu      sync.Mutex
	leafKey *ecdsa.PrivateKey
	leaves  map[string]*tls.Certificate
}

func validSandboxID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return false
		}
	}
	return true
}

// CA returns the PEM certificate of a sandbox's CA, creating the CA on
// first use (or when the stored one expires: a sandbox that outlives
// CALifetime needs the new one installed).
func (b *Broker) CA(sandboxID string) ([]byte, error) {
	ca, err := b.ca(sandboxID)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(ca.certPEM), nil
}

// TrustBundle returns what the sandbox should trust: the system's root
// certificates (the PEM bundle of Config.SystemRoots, or the first found of
// the usual Linux locations) followed by the sandbox's CA. Point
// SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE and NODE_EXTRA_CA_CERTS
// at it.
func (b *Broker) TrustBundle(sandboxID string) ([]byte, error) {
	ca, err := b.ca(sandboxID)
	if err != nil {
		return nil, err
	}
	files := systemRootFiles
	if b.cfg.SystemRoots != "" {
		files = []string{b.cfg.SystemRoots}
	}
	var roots []byte
	for _, f := range files {
		roots, err = os.ReadFile(f)
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("broker: system roots: %w", err)
	}
	out := make([]byte, 0, len(roots)+len(ca.certPEM)+64)
	out = append(out, roots...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, "# Warden sandbox CA (brokered credentials)\n"...)
	return append(out, ca.certPEM...), nil
}

// Forget drops a sandbox's CA, in memory and on disk (call it when the
// sandbox is deleted).
func (b *Broker) Forget(sandboxID string) error {
	b.mu.Lock()
	delete(b.cas, sandboxID)
	b.mu.Unlock()
	if b.cfg.StateDir == "" || !validSandboxID(sandboxID) {
		return nil
	}
	err := os.Remove(b.caPath(sandboxID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (b *Broker) caPath(sandboxID string) string {
	return filepath.Join(b.cfg.StateDir, sandboxID+".pem")
}

func (b *Broker) ca(sandboxID string) (*sandboxCA, error) {
	if !validSandboxID(sandboxID) {
		return nil, fmt.Errorf("broker: invalid sandbox id %q", sandboxID)
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ca := b.cas[sandboxID]; ca != nil && now.Before(ca.cert.NotAfter.Add(-leafRenewBefore)) {
		return ca, nil
	}
	if b.cfg.StateDir != "" {
		ca, err := loadCA(b.caPath(sandboxID))
		if err == nil && now.Before(ca.cert.NotAfter.Add(-leafRenewBefore)) {
			b.cas[sandboxID] = ca
			return ca, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	ca, keyPEM, err := newCA(sandboxID, now, b.cfg.CALifetime)
	if err != nil {
		return nil, err
	}
	if b.cfg.StateDir != "" {
		if err := os.MkdirAll(b.cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		if err := writeAtomicP(b.caPath(sandboxID), append(bytes.Clone(ca.certPEM), keyPEM...)); err != nil {
			return nil, err
		}
	}
	b.cas[sandboxID] = ca
	return ca, nil
}

func randSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(sandboxID string, now time.Time, lifetime time.Duration) (*sandboxCA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randSerial()
	if err != nil {
		return nil, nil, err
	}
	_, all4, _ := net.ParseCIDR("0.0.0.0/0")
	_, all6, _ := net.ParseCIDR("::/0")
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			Organization: []string{"Warden"},
			CommonName:   "Warden sandbox CA " + sandboxID,
		},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		ExcludedIPRanges:      []*net.IPNet{all4, all6},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("broker: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &sandboxCA{
			cert:    cert,
			key:     key,
			certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		},
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func loadCA(path string) (*sandboxCA, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ca := &sandboxCA{}
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "CERTIFICATE":
			ca.cert, err = x509.ParseCertificate(blk.Bytes)
			ca.certPEM = pem.EncodeToMemory(blk)
		case "PRIVATE KEY":
			var k any
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
			ca.key, _ = k.(*ecdsa.PrivateKey)
		}
		if err != nil {
			return nil, fmt.Errorf("broker: CA file %s: %w", path, err)
		}
	}
	if ca.cert == nil || ca.key == nil || !ca.key.PublicKey.Equal(ca.cert.PublicKey) {
		return nil, fmt.Errorf("broker: CA file %s: no matching certificate and ECDSA key", path)
	}
	return ca, nil
}

// leaf returns a certificate for name signed by the CA, minting and caching
// it on first use.
func (ca *sandboxCA) leaf(name string, now time.Time) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[name]; c != nil && now.Before(c.Leaf.NotAfter.Add(-leafRenewBefore)) {
		return c, nil
	}
	if ca.leafKey == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		ca.leafKey = k
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("broker: mint leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ca.leafKey, Leaf: leaf}
	if ca.leaves == nil || len(ca.leaves) >= maxLeaves {
		ca.leaves = map[string]*tls.Certificate{}
	}
	ca.leaves[name] = c
	return c, nil
}

// writeAtomicP is safefile.WriteAtomic with this package's error prefix.
func writeAtomicP(path string, data []byte) error {
	if err := safefile.WriteAtomic(path, data); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}
