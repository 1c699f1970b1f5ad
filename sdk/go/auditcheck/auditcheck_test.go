package auditcheck

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// testKey is an Ed25519 key with its signed-note name, hash and verifier
// key, built by hand from the C2SP signed-note spec.
type testKey struct {
	name string
	priv ed25519.PrivateKey
	hash uint32
	vkey string
}

func newTestKey(t *testing.T, name string, seed byte) testKey {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed + byte(i)
	}
	priv := ed25519.NewKeyFromSeed(s)
	pub := append([]byte{algEd25519}, priv.Public().(ed25519.PublicKey)...)
	sum := sha256.Sum256([]byte(name + "\n" + string(pub)))
	h := binary.BigEndian.Uint32(sum[:4])
	return testKey{name: name, priv: priv, hash: h,
		vkey: fmt.Sprintf("%s+%08x+%s", name, h, base64.StdEncoding.EncodeToString(pub))}
}

// sigLine is "— name base64(keyhash || signature over text)".
func (k testKey) sigLine(text string) string {
	sig := binary.BigEndian.AppendUint32(nil, k.hash)
	sig = append(sig, ed25519.Sign(k.priv, []byte(text))...)
	return "— " + k.name + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
}

func (k testKey) sign(text string) string { return text + "\n" + k.sigLine(text) }

// eventHash is a fake event hash (hex of 32 bytes) for seq.
func eventHash(seq int64) string {
	h := sha256.Sum256([]byte(fmt.Sprint("event ", seq)))
	return hex.EncodeToString(h[:])
}

// cpText builds a checkpoint's text over the first size fake events.
func cpText(n, size int64, prev string) string {
	var tr Tree
	for s := int64(1); s <= size; s++ {
		if err := tr.Append(eventHash(s)); err != nil {
			panic(err)
		}
	}
	root := tr.Root()
	var b strings.Builder
	fmt.Fprintf(&b, "warden-audit/test\n%d\n%s\ncheckpoint %d\n", size, base64.StdEncoding.EncodeToString(root[:]), n)
	if prev != "" {
		fmt.Fprintf(&b, "prev %s\n", prev)
	}
	fmt.Fprintf(&b, "time %s\n", time.Date(2026, 12, 1, int(n), 0, 0, 0, time.UTC).Format(time.RFC3339Nano))
	return b.String()
}

// series signs checkpoints at the given sizes, chained by prev lines, and
// returns the notes.
func series(k testKey, sizes ...int64) []string {
	var notes []string
	prev := ""
	for i, size := range sizes {
		text := cpText(int64(i+1), size, prev)
		notes = append(notes, k.sign(text))
		prev = TextHash(text)
	}
	return notes
}

func TestVerifierKey(t *testing.T) {
	k := newTestKey(t, "warden-audit", 1)
	v, err := NewVerifier(k.vkey + "\n")
	if err != nil || v.Name() != k.name || v.KeyHash() != k.hash {
		t.Fatalf("NewVerifier: %v %+v", err, v)
	}
	wrongHash := fmt.Sprintf("%s+%08x+%s", k.name, k.hash^1, strings.SplitN(k.vkey, "+", 3)[2])
	for _, bad := range []string{"", "warden-audit", "warden-audit+zz+AAAA", wrongHash,
		strings.Replace(k.vkey, "warden-audit", "other", 1)} {
		if _, err := NewVerifier(bad); err == nil {
			t.Errorf("NewVerifier(%q): no error", bad)
		}
	}
}

func TestOpen(t *testing.T) {
	k, other := newTestKey(t, "warden-audit", 1), newTestKey(t, "someone-else", 50)
	v, err := NewVerifier(k.vkey)
	if err != nil {
		t.Fatal(err)
	}
	text := cpText(1, 3, "")
	if got, err := v.Open([]byte(k.sign(text))); err != nil || got != text {
		t.Fatalf("Open: %q %v", got, err)
	}
	// Another key's signature alongside is ignored.
	if got, err := v.Open([]byte(text + "\n" + other.sigLine(text) + k.sigLine(text))); err != nil || got != text {
		t.Fatalf("Open with two signatures: %q %v", got, err)
	}
	// Altered text.
	altered := strings.Replace(k.sign(text), "\n3\n", "\n4\n", 1)
	var ise *InvalidSignatureError
	if _, err := v.Open([]byte(altered)); !errors.As(err, &ise) {
		t.Fatalf("altered: %v", err)
	}
	// Signed by another key only.
	if _, err := v.Open([]byte(other.sign(text))); err == nil {
		t.Fatal("other key: no error")
	}
	// Same name, another key (hash differs): not verified.
	impostor := newTestKey(t, "warden-audit", 99)
	if _, err := v.Open([]byte(impostor.sign(text))); err == nil {
		t.Fatal("impostor key: no error")
	}
	// Malformed.
	for _, bad := range []string{text, text + "\n", text + "\n— warden-audit !!\n", text + "\nnot a signature\n",
		strings.TrimSuffix(k.sign(text), "\n"), "a\x01b\n" + "\n" + k.sigLine("a\x01b\n")} {
		if _, err := v.Open([]byte(bad)); err == nil {
			t.Errorf("Open(%q): no error", bad)
		}
	}
}

func TestParseCheckpoints(t *testing.T) {
	k := newTestKey(t, "warden-audit", 1)
	notes := series(k, 2, 5)
	file := strings.Join(notes, "\n")
	cps, err := ParseCheckpoints([]byte(strings.ReplaceAll(file, "\n", "\r\n")), k.vkey)
	if err != nil || len(cps) != 2 {
		t.Fatalf("ParseCheckpoints: %v %v", cps, err)
	}
	c := cps[1]
	if c.Origin != "warden-audit/test" || c.N != 2 || c.Size != 5 || c.Prev != TextHash(cps[0].Text) ||
		!c.Time.Equal(time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)) || c.String() != "checkpoint 2 (5 events, 2026-12-01T02:00:00Z)" {
		t.Fatalf("checkpoint: %+v", c)
	}
	if cps[0].Prev != "" || cps[0].N != 1 || cps[0].Size != 2 {
		t.Fatalf("checkpoint 1: %+v", cps[0])
	}

	if _, err := ParseCheckpoints([]byte(file), "nope"); err == nil || !strings.Contains(err.Error(), "checkpoint public key") {
		t.Fatalf("bad key: %v", err)
	}
	if _, err := ParseCheckpoints([]byte("\n\n"), k.vkey); err == nil || err.Error() != "no checkpoint in the file" {
		t.Fatalf("empty: %v", err)
	}
	unsigned := notes[0] + "\n" + cpText(2, 5, "")
	if _, err := ParseCheckpoints([]byte(unsigned), k.vkey); err == nil || err.Error() != "note 2: no signature after its text" {
		t.Fatalf("unsigned: %v", err)
	}
	altered := notes[0] + "\n" + strings.Replace(notes[1], "\n5\n", "\n6\n", 1)
	if _, err := ParseCheckpoints([]byte(altered), k.vkey); err == nil ||
		!strings.Contains(err.Error(), `note 2 ("warden-audit/test 6"...)`) || !strings.Contains(err.Error(), "it was altered or signed by another key") {
		t.Fatalf("altered: %v", err)
	}
	badText := k.sign("warden-audit/test\nx\nAAAA\ncheckpoint 1\ntime 2026-12-01T00:00:00Z\n")
	if _, err := ParseCheckpoints([]byte(badText), k.vkey); err == nil || err.Error() != "note 1: bad tree size" {
		t.Fatalf("bad text: %v", err)
	}
}

// TestTreeRoots checks the Merkle tree against the RFC 6962 definition
// computed recursively.
func TestTreeRoots(t *testing.T) {
	var leaves [][sha256.Size]byte
	var mth func(l [][sha256.Size]byte) [sha256.Size]byte
	mth = func(l [][sha256.Size]byte) [sha256.Size]byte {
		if len(l) == 1 {
			return l[0]
		}
		k := 1
		for k*2 < len(l) {
			k *= 2
		}
		return nodeHash(mth(l[:k]), mth(l[k:]))
	}
	var tr Tree
	if tr.Root() != sha256.Sum256(nil) {
		t.Fatal("empty root")
	}
	for s := int64(1); s <= 70; s++ {
		h, _ := hex.DecodeString(eventHash(s))
		leaves = append(leaves, sha256.Sum256(append([]byte{0}, h...)))
		if err := tr.Append(eventHash(s)); err != nil {
			t.Fatal(err)
		}
		if tr.Size() != s || tr.Root() != mth(leaves) {
			t.Fatalf("size %d: root differs", s)
		}
	}
	if err := tr.Append("abc"); err == nil {
		t.Fatal("bad hash accepted")
	}
}

// fakeLog is n chained events; hashes[i] is event i+1's hash.
func fakeLog(n int64) []string {
	var hs []string
	for s := int64(1); s <= n; s++ {
		hs = append(hs, eventHash(s))
	}
	return hs
}

func runChecker(t *testing.T, k testKey, notes []string, hashes []string, skip map[int64]bool) Report {
	t.Helper()
	cps, err := ParseCheckpoints([]byte(strings.Join(notes, "\n")), k.vkey)
	if err != nil {
		t.Fatal(err)
	}
	lc := NewLogChecker(cps)
	prev := GenesisHash
	for i, h := range hashes {
		seq := int64(i + 1)
		if skip[seq] {
			continue
		}
		lc.Add(seq, prev, h)
		prev = h
	}
	return lc.Finish()
}

func TestLogChecker(t *testing.T) {
	k := newTestKey(t, "warden-audit", 1)
	notes := series(k, 3, 6, 9)
	log := fakeLog(10)

	if rep := runChecker(t, k, notes, log, nil); !rep.OK || rep.Checked != 10 || rep.Problems == nil {
		t.Fatalf("intact: %+v", rep)
	}

	t.Run("truncated", func(t *testing.T) {
		rep := runChecker(t, k, notes, log[:7], nil)
		want := Problem{8, KindMissing, "events 8 to 9 (2 events) are missing; the log ends at seq 7 but checkpoint 3 (9 events, " +
			"2026-12-01T03:00:00Z) covers 9 events: the log was truncated"}
		if rep.OK || rep.Checked != 7 || len(rep.Problems) != 1 || rep.Problems[0] != want {
			t.Fatalf("%+v", rep)
		}
	})

	t.Run("rewritten", func(t *testing.T) {
		// Event 5 replaced and the chain recomputed from it: links hold,
		// roots from checkpoint 2 on do not.
		rw := append([]string(nil), log...)
		rw[4] = eventHash(500)
		rep := runChecker(t, k, notes, rw, nil)
		if rep.OK || len(rep.Problems) != 2 {
			t.Fatalf("%+v", rep)
		}
		p := rep.Problems[0]
		if p.Seq != 4 || p.Kind != KindRewritten || p.Message != "the first 6 events do not hash to the root of checkpoint 2 (6 events, "+
			"2026-12-01T02:00:00Z): the log was rewritten after it was signed; the change is in events 4 to 6" {
			t.Fatalf("%+v", p)
		}
		if rep.Problems[1].Kind != KindRewritten || rep.Problems[1].Seq != 4 {
			t.Fatalf("%+v", rep.Problems[1])
		}
	})

	t.Run("dropped checkpoint", func(t *testing.T) {
		rep := runChecker(t, k, []string{notes[0], notes[2]}, log, nil)
		if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Kind != KindCheckpoint || rep.Problems[0].Seq != 9 ||
			rep.Problems[0].Message != "checkpoint 2 is missing: checkpoint 3 (9 events, 2026-12-01T03:00:00Z) follows checkpoint 1 "+
				"(3 events): a checkpoint was dropped" {
			t.Fatalf("%+v", rep)
		}
	})

	t.Run("replaced and reordered checkpoints", func(t *testing.T) {
		forged := k.sign(cpText(2, 6, "bm90IHRoZSBwcmV2aW91cyBvbmU="))
		rep := runChecker(t, k, []string{notes[0], forged}, log, nil)
		if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Message, "does not name checkpoint 1 before it (prev bm90IHRoZSBw): a checkpoint was replaced") {
			t.Fatalf("replaced: %+v", rep)
		}
		rep = runChecker(t, k, []string{notes[1], notes[0]}, log, nil)
		if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[0].Message, "comes after checkpoint 2: the checkpoints are out of order or repeated") ||
			!strings.Contains(rep.Problems[1].Message, "covers fewer events than checkpoint 2 (6): the log shrank between them") {
			t.Fatalf("reordered: %+v", rep)
		}
	})

	t.Run("gap and broken link", func(t *testing.T) {
		rep := runChecker(t, k, notes[:1], log[:5], map[int64]bool{2: true})
		// Seq 2 absent: a gap, and the tree lacks a leaf so checkpoint 1
		// (3 events) is compared at size 3 = seqs 1,3,4.
		if len(rep.Problems) < 2 || rep.Problems[0] != (Problem{2, KindMissing, "event 2 is missing"}) || rep.Problems[1].Kind != KindRewritten {
			t.Fatalf("gap: %+v", rep)
		}
		cps, _ := ParseCheckpoints([]byte(notes[0]), k.vkey)
		lc := NewLogChecker(cps)
		lc.Add(1, GenesisHash, log[0])
		lc.Add(2, eventHash(77), log[1])
		lc.Add(2, log[1], log[2])
		lc.Add(3, log[1], "zz")
		rep = lc.Finish()
		want := []Problem{
			{2, KindBrokenChain, "event 2 does not link to the hash of event 1 stored before it"},
			{2, KindReordered, "event has seq 2, not after 2"},
			{3, KindModified, "event 3: event hash is not 32 bytes of hex"},
			{1, KindRewritten, "the first 3 events do not hash to the root of checkpoint 1 (3 events, 2026-12-01T01:00:00Z): " +
				"the log was rewritten after it was signed; the change is in events 1 to 3"},
		}
		if fmt.Sprint(rep.Problems) != fmt.Sprint(want) {
			t.Fatalf("got  %+v\nwant %+v", rep.Problems, want)
		}
	})

	t.Run("empty checkpoint", func(t *testing.T) {
		rep := runChecker(t, k, series(k, 0), nil, nil)
		if !rep.OK || rep.Checked != 0 {
			t.Fatalf("%+v", rep)
		}
	})
}
