package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
)

// restoreSnapshot starts a create's sandbox from its snapshot's memory
// image (internal/snapshot/memory.go) when the image can: the requested
// backend (isolation, or the default) is the image's and no volumes are
// asked for. It reports false when the sandbox should boot from the
// snapshot's files instead, as for a files-only snapshot. The restored
// sandbox keeps the source's settings (limits, user, environment,
// network policy, lifetimes); the request may give only its name, metadata
// and timeout (422 otherwise: nothing it asks for is silently dropped).
func (s *Server) restoreSnapshot(r *http.Request, q createSandboxRequest) (store.Sandbox, bool, error) {
	sn := q.memSnap
	iso := deref(q.Isolation)
	if iso == "" {
		iso = s.mgr.DefaultBackend()
	}
	if iso != sn.MemoryBackend || len(q.Volumes) > 0 {
		return store.Sandbox{}, false, nil
	}
	if q.CPUMillis != nil || q.MemoryMB != nil || q.DiskMB != nil || len(q.Env) > 0 || q.User != nil || q.Workdir != nil ||
		q.AutoPause != nil || q.AutoResume != nil || q.Sudo != nil || q.Network != nil || q.IdleTimeoutSeconds != nil ||
		q.MaxLifetimeSeconds != nil || q.OnIdle != "" || q.PausedRetentionSeconds != nil {
		return store.Sandbox{}, false, apierr.Validation("snapshot %s keeps memory: a sandbox restored from it has its source's settings; "+
			"give only name, metadata and timeout_seconds (or another isolation to boot on its files)", sn.Name)
	}
	ref, err := snapshot.MemoryRef(*sn)
	if err != nil {
		return store.Sandbox{}, false, err
	}
	st := stateOf(r)
	sb, err := s.mgr.RestoreMemory(r.Context(), sandbox.RestoreRequest{
		Owner: st.principal, Name: q.Name, Snapshot: sn.ID, Source: sn.SandboxID,
		Backend: sn.MemoryBackend, Ref: ref, Metadata: q.Metadata,
		Timeout: time.Duration(wire(q.TimeoutSeconds)) * time.Second,
	})
	if errors.Is(err, sandbox.ErrMemoryUnusable) {
		s.log.Warn("snapshot memory image not usable; booting from its files", "snapshot", sn.ID, "err", err)
		return store.Sandbox{}, false, nil
	}
	if err != nil {
		return store.Sandbox{}, false, err
	}
	st.detail["memory"] = true
	st.detail["template"] = sb.Template
	return sb, true, nil
}
