package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// KeySize is the size of the HMAC key in bytes.
const KeySize = 32

// GenesisHash is the PrevHash of the first event: 32 zero bytes in hex.
var GenesisHash = strings.Repeat("00", sha256.Size)

// Domain-separation prefixes, so an event MAC can never be mistaken for a
// checkpoint MAC or for a MAC of a future encoding.
const (
	eventDomain      = "warden-audit-event-v1\x00"
	checkpointDomain = "warden-audit-checkpoint-v1\x00"
)

// eventMAC computes the event hash
//
//	HMAC-SHA256(key, "warden-audit-event-v1\x00" || prev_hash || canonical(event))
//
// where prev_hash is the 32 raw bytes of e.PrevHash and canonical(event) is
// seq (8 bytes, big endian), time (unix nanoseconds, 8 bytes, big endian,
// two's complement), then request_id, principal_id, action, target, outcome
// and detail, each as a 4-byte big-endian length followed by its bytes.
// Every field has a fixed size or a length prefix, so no two different
// events encode to the same bytes. seq is the one passed in, not e.Seq, so
// Verify can test where a moved event was written. It fails only when
// e.PrevHash is not 32 bytes of hex.
func eventMAC(key []byte, seq int64, e Event) ([]byte, error) {
	prev, err := hex.DecodeString(e.PrevHash)
	if err != nil || len(prev) != sha256.Size {
		return nil, errors.New("prev_hash is not 32 bytes of hex")
	}
	m := hmac.New(sha256.New, key)
	io.WriteString(m, eventDomain)
	m.Write(prev)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(seq))
	m.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(e.Time.UnixNano()))
	m.Write(n[:])
	for _, f := range [][]byte{
		[]byte(e.RequestID), []byte(e.PrincipalID), []byte(e.Action), []byte(e.Target), []byte(e.Outcome), e.Detail,
	} {
		binary.BigEndian.PutUint32(n[:4], uint32(len(f)))
		m.Write(n[:4])
		m.Write(f)
	}
	return m.Sum(nil), nil
}

// authentic reports whether e.Hash is the MAC of e written at seq.
func authentic(key []byte, seq int64, e Event) bool {
	want, err := eventMAC(key, seq, e)
	if err != nil {
		return false
	}
	got, err := hex.DecodeString(e.Hash)
	return err == nil && hmac.Equal(got, want)
}

// checkpointMAC authenticates a checkpoint (seq, hash).
func checkpointMAC(key []byte, seq int64, hash string) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, checkpointDomain)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(seq))
	m.Write(n[:])
	io.WriteString(m, hash)
	return m.Sum(nil)
}

// canonicalDetail returns detail as compact JSON with object keys sorted
// and numbers kept verbatim, so the bytes that are hashed do not depend on
// how the caller formatted them. Empty detail becomes {}.
func canonicalDetail(detail json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(detail)) == 0 {
		return json.RawMessage("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(detail))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("detail is not valid json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("detail is not valid json: trailing data")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode detail: %w", err)
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}
