package auditcheck

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Checkpoint is a parsed, verified checkpoint of the audit log: the head
// of the Merkle tree over the first Size events, in the C2SP
// tlog-checkpoint form the daemon signs:
//
//	<origin>
//	<tree size>
//	<base64 root hash>
//	checkpoint <N>
//	prev <base64 SHA-256 of checkpoint N-1's text>   (from N = 2)
//	time <RFC 3339>
type Checkpoint struct {
	Origin string
	N      int64
	Size   int64
	Root   [sha256.Size]byte
	Prev   string // base64 SHA-256 of the previous checkpoint's text; "" for N = 1
	Time   time.Time
	Text   string // the signed text
}

func (c Checkpoint) String() string {
	return fmt.Sprintf("checkpoint %d (%d events, %s)", c.N, c.Size, c.Time.UTC().Format(time.RFC3339))
}

// TextHash is the base64 SHA-256 of a checkpoint's text, as the next
// checkpoint's prev line names it.
func TextHash(text string) string {
	h := sha256.Sum256([]byte(text))
	return base64.StdEncoding.EncodeToString(h[:])
}

// ParseCheckpoint parses a checkpoint's text (not verified: see
// ParseCheckpoints).
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 5 {
		return Checkpoint{}, errors.New("too few lines for a checkpoint")
	}
	c := Checkpoint{Origin: lines[0], Text: text}
	var err error
	if c.Size, err = strconv.ParseInt(lines[1], 10, 64); err != nil || c.Size < 0 {
		return Checkpoint{}, errors.New("bad tree size")
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != sha256.Size {
		return Checkpoint{}, errors.New("bad root hash")
	}
	copy(c.Root[:], root)
	for _, l := range lines[3:] {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "checkpoint":
			if c.N, err = strconv.ParseInt(v, 10, 64); err != nil || c.N < 1 {
				return Checkpoint{}, errors.New("bad checkpoint number")
			}
		case "prev":
			c.Prev = v
		case "time":
			if c.Time, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return Checkpoint{}, errors.New("bad time")
			}
		}
	}
	if c.N == 0 {
		return Checkpoint{}, errors.New("no checkpoint number")
	}
	return c, nil
}

// ParseCheckpoints reads one or more signed checkpoints, as the daemon
// writes them to its checkpoint file (notes one after the other, a blank
// line between them), and verifies each signature with the verifier key
// vkey (the daemon's audit-checkpoint.pub). A note that does not verify is
// an error naming it.
func ParseCheckpoints(data []byte, vkey string) ([]Checkpoint, error) {
	v, err := NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("checkpoint public key: %w", err)
	}
	// A note is its text, a blank line and its signature lines (which
	// start with "— "); notes are separated by a blank line.
	parts := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n")
	var out []Checkpoint
	for i := 0; i < len(parts); i++ {
		text := strings.TrimLeft(parts[i], "\n")
		if strings.TrimSpace(text) == "" {
			continue
		}
		if i+1 >= len(parts) || !strings.HasPrefix(parts[i+1], "— ") {
			return nil, fmt.Errorf("note %d: no signature after its text", len(out)+1)
		}
		sigs := strings.TrimRight(parts[i+1], "\n") + "\n"
		i++
		signed, err := v.Open([]byte(text + "\n\n" + sigs))
		if err != nil {
			return nil, fmt.Errorf("note %d (%q...): %w: it was altered or signed by another key", len(out)+1, firstLines(text, 2), err)
		}
		c, err := ParseCheckpoint(signed)
		if err != nil {
			return nil, fmt.Errorf("note %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no checkpoint in the file")
	}
	return out, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " ")
}
