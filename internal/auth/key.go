package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// API key format: "wdn_" + 8-character ID + "_" + 32-character secret.
// The ID is lowercase base32 (a-z, 2-7; 40 bits), public, and names the
// key in URLs and lists. The secret is base62 (A-Z, a-z, 0-9; about 190
// bits) and is stored only as its SHA-256.
const (
	KeyPrefix    = "wdn_"
	KeyIDLen     = 8
	KeySecretLen = 32
	// KeyLen is the length of a whole key.
	KeyLen = len(KeyPrefix) + KeyIDLen + 1 + KeySecretLen
)

const (
	idAlphabet     = "abcdefghijklmnopqrstuvwxyz234567"
	secretAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// Key is a parsed API key.
type Key struct {
	ID     string
	Secret string
}

// String returns the key in its wire form, wdn_<id>_<secret>. It is the
// only place the secret appears; do not log it.
func (k Key) String() string { return KeyPrefix + k.ID + "_" + k.Secret }

// Prefix returns the public part of the key, wdn_<id>, safe to show and
// log.
func (k Key) Prefix() string { return KeyPrefix + k.ID }

// Hash returns the stored form of the secret: hex SHA-256.
func (k Key) Hash() string { return HashSecret(k.Secret) }

// HashSecret returns the hex SHA-256 of a key secret. A fast hash is
// enough: the secret is 190 random bits, not a password.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// matchHash reports, in constant time, whether secret hashes to the stored
// hex hash.
func matchHash(secret, stored string) bool {
	got := sha256.Sum256([]byte(secret))
	want, err := hex.DecodeString(stored)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(got[:], want) == 1
}

// GenerateKey returns a new random key from crypto/rand.
func GenerateKey() (Key, error) {
	id, err := randomString(idAlphabet, KeyIDLen)
	if err != nil {
		return Key{}, fmt.Errorf("generate api key: %w", err)
	}
	secret, err := randomString(secretAlphabet, KeySecretLen)
	if err != nil {
		return Key{}, fmt.Errorf("generate api key: %w", err)
	}
	return Key{ID: id, Secret: secret}, nil
}

// randomString returns n characters drawn uniformly from alphabet (at most
// 256 characters), rejecting bytes that would bias the draw.
func randomString(alphabet string, n int) (string, error) {
	limit := 256 - 256%len(alphabet)
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}

// ParseKey parses a key in wire form. Anything but exactly
// wdn_<8 id chars>_<32 secret chars> is ErrMalformed.
func ParseKey(s string) (Key, error) {
	if len(s) != KeyLen || !strings.HasPrefix(s, KeyPrefix) {
		return Key{}, ErrMalformed
	}
	rest := s[len(KeyPrefix):]
	id, secret := rest[:KeyIDLen], rest[KeyIDLen+1:]
	if rest[KeyIDLen] != '_' || !only(id, idAlphabet) || !only(secret, secretAlphabet) {
		return Key{}, ErrMalformed
	}
	return Key{ID: id, Secret: secret}, nil
}

// ParseAuthorization extracts the key from an Authorization header value,
// "Bearer <key>" (scheme case-insensitive, as in RFC 7235). An empty
// header is ErrNoCredentials; anything else that does not parse is
// ErrMalformed.
func ParseAuthorization(header string) (Key, error) {
	header = strings.TrimSpace(header)
	if header == "" {
		return Key{}, ErrNoCredentials
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Key{}, ErrMalformed
	}
	return ParseKey(strings.TrimLeft(token, " "))
}

func only(s, alphabet string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(alphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}
