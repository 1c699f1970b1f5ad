package native

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/hostproc"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
)

// Cold restart (backend.Restarter): E2B's filesystem-only pause. The
// writable layer of a sandbox with a disk image lives on that image,
// mounted on Dir/stage in wardend's mount namespace, and outlives the
// sandbox's processes; the overlay's upper and work directories stay on it
// (nsinit's buildRoot reuses them). StopKeep kills every process and keeps
// the slot, cgroup, run directory and image; Restart boots a new agent, in
// new namespaces, on them. A sandbox whose writable layer is a tmpfs (no
// disk images) cannot: the tmpfs dies with its mount namespace.

// specFile holds, in a sandbox's run directory, the spec it was created
// with: Restart boots with it, also after a daemon restart.
const specFile = "spec.json"

// saveSpec writes spec to dir/spec.json (root's only).
func saveSpec(dir string, spec backend.Spec) error {
	raw, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("save spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, specFile), raw, 0o600); err != nil {
		return fmt.Errorf("save spec: %w", err)
	}
	return nil
}

// specOf returns bx's spec, read from its run directory when this daemon
// did not create it (a recovered sandbox).
func (b *Backend) specOf(bx *box) (backend.Spec, error) {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.spec.ID != "" {
		return bx.spec, nil
	}
	raw, err := os.ReadFile(filepath.Join(bx.state.Dir, specFile))
	if err != nil {
		return backend.Spec{}, fmt.Errorf("%s: read spec: %w", bx.id, err)
	}
	var spec backend.Spec
	if err := json.Unmarshal(raw, &spec); err != nil || spec.ID != bx.id {
		return backend.Spec{}, fmt.Errorf("%s: unreadable spec (%v): %w", bx.id, err, backend.ErrInvalidSpec)
	}
	bx.spec = spec
	return spec, nil
}

// StopKeep implements backend.Restarter.
func (b *Backend) StopKeep(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	if !bx.state.Disk {
		return h, fmt.Errorf("%w: sandbox %s keeps its writable layer in memory (no disk images: disk_dir), which does not outlive its processes", backend.ErrUnsupported, bx.id)
	}
	spec, err := b.specOf(bx)
	if err != nil {
		return h, err
	}
	if len(spec.Uppers) > 0 {
		return h, fmt.Errorf("%w: sandbox %s captures its writable layer (a template build)", backend.ErrUnsupported, bx.id)
	}
	if bx.state.Kept || !bx.running() {
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	cg, err := bx.group()
	if err != nil {
		return h, err
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.Kill(kctx, h); err != nil {
		return h, fmt.Errorf("stop %s: %w", bx.id, err)
	}
	// PID 1's end kills the rest of the pid namespace; wait until the
	// cgroup is empty, so the old mount namespace (its overlay on the
	// kept upper directory) is gone before a restart mounts it again.
	for {
		procs, err := cg.Procs()
		if err != nil || len(procs) == 0 {
			break
		}
		cg.Kill()
		select {
		case <-kctx.Done():
			return h, fmt.Errorf("stop %s: %d processes outlived the kill: %w", bx.id, len(procs), kctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if bx.pidfd >= 0 {
		unix.Close(bx.pidfd)
		bx.pidfd = -1
	}
	os.Remove(filepath.Join(bx.state.Dir, "agent.sock"))
	return b.handle(b.keep(bx, spec)), nil
}

// keep replaces bx, whose processes are gone, by a stopped box holding
// the same host resources (slot, cgroup, run directory, disk image),
// records it in its run directory and returns it. Callers that still hold
// bx see it ended; lookups find the new box.
func (b *Backend) keep(bx *box, spec backend.Spec) *box {
	st := bx.state
	st.Pid, st.StartTime, st.Kept = 0, 0, true
	nb := &box{id: bx.id, state: st, spec: spec, pidfd: -1, done: make(chan struct{})}
	bx.mu.Lock()
	nb.cg = bx.cg
	bx.mu.Unlock()
	b.boxes.Replace(bx.id, bx, nb)
	b.saveState(nb)
	return nb
}

// Restart implements backend.Restarter.
func (b *Backend) Restart(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	spec, err := b.specOf(bx)
	if err != nil {
		return h, err
	}
	if _, err := bx.group(); err != nil { // start adds the agent to it
		return h, err
	}
	bx.mu.Lock()
	if !bx.state.Kept || bx.started {
		bx.mu.Unlock()
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrAlreadyStart)
	}
	stage := filepath.Join(bx.state.Dir, "stage")
	if !diskimg.Mounted(stage) {
		bx.mu.Unlock()
		return h, fmt.Errorf("%s: its kept writable layer is not mounted on %s", bx.id, stage)
	}
	os.Remove(filepath.Join(bx.state.Dir, "agent.sock"))
	bx.state.Kept = false
	err = b.start(ctx, bx)
	bx.mu.Unlock()
	if err != nil {
		// start killed what it began and waited for it: the sandbox stays
		// stopped on its kept layer, as it was.
		if bx.pidfd >= 0 {
			unix.Close(bx.pidfd)
			bx.pidfd = -1
		}
		b.keep(bx, spec)
		return h, fmt.Errorf("restart %s: %w", bx.id, err)
	}
	return b.handle(bx), nil
}

// recoverKept re-attaches, after a daemon restart, a sandbox that StopKeep
// stopped: nothing of it runs; its cgroup and its mounted disk image must
// still be there.
func (b *Backend) recoverKept(bx *box) error {
	reason := ""
	if !bx.state.Disk || !diskimg.Mounted(filepath.Join(bx.state.Dir, "stage")) {
		reason = "its kept writable layer is not mounted"
	} else if _, err := os.Stat(filepath.Join(bx.state.Dir, specFile)); err != nil {
		reason = "its spec is gone"
	} else if _, err := bx.group(); err != nil {
		reason = err.Error()
	}
	if reason != "" {
		b.forget(bx)
		return fmt.Errorf("%s: %s: %w", bx.id, reason, backend.ErrLost)
	}
	bx.started = false
	return nil
}

// keptState returns the state its run directory records for a sandbox
// when that says StopKeep stopped it and st does not: a daemon that ended
// between StopKeep and storing the handle it returned holds the one before.
func keptState(st handleData) handleData {
	if st.Kept || st.Dir == "" {
		return st
	}
	h, err := hostproc.ReadHandle(st.Dir)
	if err != nil {
		return st
	}
	var ds handleData
	if json.Unmarshal(h.Data, &ds) != nil || !ds.Kept || ds.Dir != st.Dir || ds.Slot != st.Slot || ds.Cgroup != st.Cgroup {
		return st
	}
	return ds
}
