package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// auditAnchorJSON is GET /v1/audit/anchor's body (spec: AuditAnchor).
type auditAnchorJSON struct {
	Size       int64             `json:"size"`
	Hash       string            `json:"hash,omitempty"`
	Checkpoint *anchorCheckpoint `json:"checkpoint,omitempty"`
	Nodes      map[string]string `json:"nodes"`
	PrunedAt   string            `json:"pruned_at,omitempty"`
}

type anchorCheckpoint struct {
	N    int64  `json:"n"`
	Note string `json:"note"`
}

// getAuditAnchor serves where the retained audit log starts: the anchor
// audit retention left for the deleted events, with its signed checkpoint.
func (s *Server) getAuditAnchor(w http.ResponseWriter, r *http.Request) error {
	out := auditAnchorJSON{Nodes: map[string]string{}}
	as, ok := s.st.(store.AuditRetentionStore)
	if !ok {
		return writeJSON(w, http.StatusOK, out)
	}
	a, err := as.GetAuditAnchor(r.Context())
	if errors.Is(err, store.ErrNotFound) {
		return writeJSON(w, http.StatusOK, out)
	}
	if err != nil {
		return err
	}
	out.Size, out.Hash, out.PrunedAt = a.Size, a.Hash, a.PrunedAt.UTC().Format(time.RFC3339Nano)
	if a.Nodes != nil {
		out.Nodes = a.Nodes
	}
	if cs, ok := s.st.(store.UsageStore); ok {
		cps, err := cs.ListAuditCheckpoints(r.Context())
		if err != nil {
			return err
		}
		for _, c := range cps {
			if c.N == a.CheckpointN {
				out.Checkpoint = &anchorCheckpoint{N: c.N, Note: c.Note}
			}
		}
	}
	return writeJSON(w, http.StatusOK, out)
}
