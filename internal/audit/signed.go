package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

// Signed checkpoints (Audit II). A checkpoint is the head of the RFC 6962
// Merkle tree over the events' hashes (Tree), in the C2SP tlog-checkpoint
// form, signed with an Ed25519 key as a C2SP signed note:
//
//	<origin>
//	<tree size>
//	<base64 root hash>
//	checkpoint <N>
//	prev <base64 SHA-256 of checkpoint N-1's text>   (from N = 2)
//	time <RFC 3339>
//
//	— <key name> <base64 signature>
//
// Whoever keeps a copy of a checkpoint and the public key can later check
// that the log still holds the events the checkpoint covers, unchanged
// (CheckLog): truncation and a rewritten chain are caught without the
// HMAC key, and the prev lines make the series of checkpoints a chain of
// its own, so dropping one is caught too.

// SigningKeySize is the size of the Ed25519 seed in the key file.
const SigningKeySize = 32

// Keys returns the note signer and the verifier key (the public key, in
// the signed-note "name+hash+base64" form) of an Ed25519 seed.
func Keys(seed []byte, name string) (note.Signer, string, error) {
	if len(seed) != SigningKeySize {
		return nil, "", fmt.Errorf("checkpoint key: %d bytes, want %d", len(seed), SigningKeySize)
	}
	skey, vkey, err := note.GenerateKey(bytes.NewReader(seed), name)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint key: %w", err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint key: %w", err)
	}
	return s, vkey, nil
}

func checkpointText(origin string, n, size int64, root [sha256.Size]byte, prev string, t time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%d\n%s\ncheckpoint %d\n", origin, size, base64.StdEncoding.EncodeToString(root[:]), n)
	if prev != "" {
		fmt.Fprintf(&b, "prev %s\n", prev)
	}
	fmt.Fprintf(&b, "time %s\n", t.UTC().Format(time.RFC3339Nano))
	return b.String()
}

func textHash(text string) string {
	h := sha256.Sum256([]byte(text))
	return base64.StdEncoding.EncodeToString(h[:])
}

// CheckpointStore keeps the signed checkpoints (*sqlite.Store).
type CheckpointStore interface {
	AddAuditCheckpoint(ctx context.Context, c store.AuditCheckpoint) error
	ListAuditCheckpoints(ctx context.Context) ([]store.AuditCheckpoint, error)
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Store       store.Store // the audit events
	Checkpoints CheckpointStore
	// Seed is the Ed25519 signing key's seed (SigningKeySize bytes, from
	// a root-only file: LoadOrCreateKey works).
	Seed []byte
	// Origin is the checkpoints' first line, naming the log.
	Origin string
	// KeyName is the signing key's name in the notes.
	KeyName string
	// File receives every checkpoint, appended; PublicKeyFile the
	// verifier key. Either may be "".
	File, PublicKeyFile string
	// URL, when set, receives each checkpoint as a POST (text/plain).
	URL    string
	Client *http.Client
	// Interval between checkpoints (made only when the log grew).
	Interval time.Duration
	Now      func() time.Time
	Log      *slog.Logger
}

// Publisher makes signed checkpoints of the audit log periodically.
type Publisher struct {
	cfg    PublisherConfig
	signer note.Signer
	vkey   string

	mu   sync.Mutex
	tree Tree
	last store.AuditCheckpoint // N 0 when none yet
}

// NewPublisher loads the last checkpoint and builds the tree of the log
// as it stands (one pass over the log).
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	if cfg.Store == nil || cfg.Checkpoints == nil || cfg.Origin == "" {
		return nil, errors.New("audit checkpoints: no store or origin")
	}
	if cfg.KeyName == "" {
		cfg.KeyName = "warden-audit"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	signer, vkey, err := Keys(cfg.Seed, cfg.KeyName)
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, signer: signer, vkey: vkey}
	cps, err := cfg.Checkpoints.ListAuditCheckpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit checkpoints: %w", err)
	}
	if len(cps) > 0 {
		p.last = cps[len(cps)-1]
	}
	// After retention, the tree continues from the anchor's.
	if a, ok, err := loadAnchor(ctx, cfg.Store); err != nil {
		return nil, fmt.Errorf("audit checkpoints: %w", err)
	} else if ok {
		nodes, err := auditcheck.ParseNodes(a.Nodes)
		if err == nil {
			p.tree, err = auditcheck.TreeAt(a.Size, nodes.Get)
		}
		if err != nil {
			return nil, fmt.Errorf("audit checkpoints: the retention anchor (events 1 to %d): %w", a.Size, err)
		}
	}
	if err := cfg.Store.WalkAudit(ctx, func(e Event) error { return p.tree.Append(e.Hash) }); err != nil {
		return nil, fmt.Errorf("audit checkpoints: read the log: %w", err)
	}
	if cfg.PublicKeyFile != "" {
		if err := os.WriteFile(cfg.PublicKeyFile, []byte(vkey+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("audit checkpoints: %w", err)
		}
	}
	return p, nil
}

// PublicKey is the verifier key of the checkpoints.
func (p *Publisher) PublicKey() string { return p.vkey }

// Run makes a checkpoint every Interval until ctx ends, and a last one
// then.
func (p *Publisher) Run(ctx context.Context) {
	if p.cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if _, _, err := p.Checkpoint(context.WithoutCancel(ctx)); err != nil {
				p.cfg.Log.Error("audit checkpoint", "err", err)
			}
			return
		case <-t.C:
			if _, _, err := p.Checkpoint(ctx); err != nil {
				p.cfg.Log.Error("audit checkpoint", "err", err)
			}
		}
	}
}

// Checkpoint brings the tree up to the end of the log and, if it grew
// since the last checkpoint (or there is none), signs, stores and
// publishes a new one. ok is false when nothing was made.
func (p *Publisher) Checkpoint(ctx context.Context) (cp store.AuditCheckpoint, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkpoint(ctx)
}

// checkpoint is Checkpoint under p.mu.
func (p *Publisher) checkpoint(ctx context.Context) (cp store.AuditCheckpoint, ok bool, err error) {
	for {
		evs, err := p.cfg.Store.ListAudit(ctx, store.AuditFilter{After: p.tree.Size(), Limit: store.MaxPageSize})
		if err != nil {
			return cp, false, fmt.Errorf("audit checkpoint: read the log: %w", err)
		}
		for _, e := range evs {
			if e.Seq != p.tree.Size()+1 {
				return cp, false, fmt.Errorf("audit checkpoint: the log has seq %d after %d; run warden audit verify", e.Seq, p.tree.Size())
			}
			if err := p.tree.Append(e.Hash); err != nil {
				return cp, false, fmt.Errorf("audit checkpoint: event %d: %w", e.Seq, err)
			}
		}
		if len(evs) < store.MaxPageSize {
			break
		}
	}
	if p.last.N > 0 && p.last.Size == p.tree.Size() {
		return p.last, false, nil
	}
	prev := ""
	if p.last.N > 0 {
		n, err := note.Open([]byte(p.last.Note), note.VerifierList(mustVerifier(p.vkey)))
		if err != nil {
			return cp, false, fmt.Errorf("audit checkpoint %d in the database does not verify: %w", p.last.N, err)
		}
		prev = textHash(n.Text)
	}
	root := p.tree.Root()
	now := p.cfg.Now()
	text := checkpointText(p.cfg.Origin, p.last.N+1, p.tree.Size(), root, prev, now)
	signed, err := note.Sign(&note.Note{Text: text}, p.signer)
	if err != nil {
		return cp, false, fmt.Errorf("audit checkpoint: sign: %w", err)
	}
	cp = store.AuditCheckpoint{N: p.last.N + 1, Size: p.tree.Size(), Root: base64.StdEncoding.EncodeToString(root[:]),
		Note: string(signed), CreatedAt: now}
	if err := p.cfg.Checkpoints.AddAuditCheckpoint(ctx, cp); err != nil {
		return store.AuditCheckpoint{}, false, err
	}
	p.last = cp
	if p.cfg.File != "" {
		if err := appendNote(p.cfg.File, signed); err != nil {
			return cp, true, fmt.Errorf("audit checkpoint %d: %w", cp.N, err)
		}
	}
	if p.cfg.URL != "" {
		if err := p.post(ctx, signed); err != nil {
			p.cfg.Log.Warn("audit checkpoint: publish", "url", p.cfg.URL, "n", cp.N, "err", err)
		}
	}
	return cp, true, nil
}

func mustVerifier(vkey string) note.Verifier {
	v, _ := note.NewVerifier(vkey) // made by Keys: valid
	return v
}

// appendNote appends a note to the checkpoint file, a blank line before it
// unless the file is empty, and syncs it.
func appendNote(path string, signed []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() > 0 {
		_, err = f.Write([]byte("\n"))
	}
	if err == nil {
		_, err = f.Write(signed)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (p *Publisher) post(ctx context.Context, signed []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(signed))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
