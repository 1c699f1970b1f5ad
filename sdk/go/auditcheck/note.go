// Package auditcheck verifies a Warden audit log on the client side,
// against signed checkpoints saved from the daemon, without trusting the
// daemon: it parses and verifies the C2SP signed notes the daemon writes
// (Ed25519), rebuilds the RFC 6962 Merkle tree over the events' hashes and
// reports truncation, rewrites and dropped checkpoints.
//
// It uses the standard library only.
package auditcheck

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// algEd25519 is the signed-note algorithm byte of Ed25519 keys.
const algEd25519 = 1

// maxSigs bounds the signature lines of one note.
const maxSigs = 100

var (
	errMalformedNote = errors.New("malformed note")
	errVerifierID    = errors.New("malformed verifier id")
	errVerifierHash  = errors.New("invalid verifier hash")
	errVerifierAlg   = errors.New("unknown verifier algorithm")
	errNoVerifiedSig = errors.New("note has no verifiable signatures")
)

// Verifier checks C2SP signed notes (https://c2sp.org/signed-note) signed
// by one Ed25519 key.
type Verifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

// NewVerifier parses a verifier key in the signed-note form
// "<name>+<8 hex digits of the key hash>+<base64 of 0x01 || public key>".
func NewVerifier(vkey string) (*Verifier, error) {
	name, rest, _ := strings.Cut(strings.TrimSpace(vkey), "+")
	hash16, key64, _ := strings.Cut(rest, "+")
	hash, err1 := strconv.ParseUint(hash16, 16, 32)
	key, err2 := base64.StdEncoding.DecodeString(key64)
	if len(hash16) != 8 || err1 != nil || err2 != nil || !validName(name) || len(key) == 0 {
		return nil, errVerifierID
	}
	if uint32(hash) != keyHash(name, key) {
		return nil, errVerifierHash
	}
	if key[0] != algEd25519 {
		return nil, errVerifierAlg
	}
	if len(key) != 1+ed25519.PublicKeySize {
		return nil, errVerifierID
	}
	return &Verifier{name: name, hash: uint32(hash), key: ed25519.PublicKey(key[1:])}, nil
}

// Name is the key's name.
func (v *Verifier) Name() string { return v.name }

// KeyHash is the key's hash, as in the verifier key and the signatures.
func (v *Verifier) KeyHash() uint32 { return v.hash }

// keyHash is the first 4 bytes of SHA-256(name || "\n" || alg || key),
// big-endian; key starts with the algorithm byte.
func keyHash(name string, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func validName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}

// InvalidSignatureError is a signature by the verifier's key that does not
// verify: the text was altered.
type InvalidSignatureError struct {
	Name string
	Hash uint32
}

func (e *InvalidSignatureError) Error() string {
	return fmt.Sprintf("invalid signature for key %s+%08x", e.Name, e.Hash)
}

// Open verifies a signed note: its text, a blank line, and signature lines
// "— <name> <base64(key hash || signature)>". It returns the text (ending
// in a newline) when a signature by v's key verifies over it; signatures
// by other keys are ignored, but at least one must be v's.
func (v *Verifier) Open(msg []byte) (string, error) {
	// Valid UTF-8 without ASCII control characters other than newline.
	for i := 0; i < len(msg); {
		r, size := utf8.DecodeRune(msg[i:])
		if r < 0x20 && r != '\n' || r == utf8.RuneError && size == 1 {
			return "", errMalformedNote
		}
		i += size
	}
	split := bytes.LastIndex(msg, []byte("\n\n"))
	if split < 0 {
		return "", errMalformedNote
	}
	text, sigs := msg[:split+1], msg[split+2:]
	if len(sigs) == 0 || sigs[len(sigs)-1] != '\n' {
		return "", errMalformedNote
	}
	verified := false
	for n := 0; len(sigs) > 0; n++ {
		if n >= maxSigs {
			return "", errMalformedNote
		}
		i := bytes.IndexByte(sigs, '\n')
		line := string(sigs[:i])
		sigs = sigs[i+1:]
		rest, ok := strings.CutPrefix(line, "— ")
		if !ok {
			return "", errMalformedNote
		}
		name, b64, _ := strings.Cut(rest, " ")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || !validName(name) || b64 == "" || len(sig) < 5 {
			return "", errMalformedNote
		}
		if name != v.name || binary.BigEndian.Uint32(sig[:4]) != v.hash {
			continue // another key's signature
		}
		if !ed25519.Verify(v.key, text, sig[4:]) {
			return "", &InvalidSignatureError{v.name, v.hash}
		}
		verified = true
	}
	if !verified {
		return "", errNoVerifiedSig
	}
	return string(text), nil
}
