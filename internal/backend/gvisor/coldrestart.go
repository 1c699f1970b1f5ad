package gvisor

// Cold restart (backend.Restarter): E2B's filesystem-only pause.
//
// The writable layer of "/" is a tmpfs inside gVisor's kernel whose pages
// live in a host file (the overlay's filestore, Config.DiskDir or
// DiskOverlay): it means nothing without that kernel. So StopKeep saves it
// with gVisor's filesystem checkpoint (runsc fscheckpoint: the upper
// layer's tree and its pages, no process, no memory of the sandbox) into
// CheckpointDir/<id>, as a pause does with a full checkpoint, and ends the
// kernel; Restart boots a new kernel on the same bundle and run directory
// with runsc create --fs-restore-image-path, which fills the new overlay's
// upper layer from that image before the init runs. The new kernel has a
// new boot id, a new PID 1 (the init and agent) and no process of before.
// A sandbox whose writable layer is in gVisor's memory (neither DiskDir nor
// DiskOverlay) cannot: gVisor's filesystem checkpoint saves only
// file-backed layers, and StopKeep refuses with ErrUnsupported.
//
// What is kept is what the overlay of "/" holds. /tmp and /dev/shm are
// tmpfs mounts of the init (as on the native backend, they start empty),
// and so are the writable layers of deeper template targets (the base
// template's /usr): those are not kept.
//
// The sequence, so that a crash leaves the sandbox either running or
// stopped with its files:
//
//  1. The pausing marker (checkpoint.go), runsc pause (every task stops),
//     runsc fscheckpoint --leave-running into CheckpointDir/<id>.new (the
//     kernel stays paused by runsc pause). On failure the sandbox resumes.
//  2. The image is renamed to CheckpointDir/<id>: from here it is the
//     sandbox's writable layer. The run directory's handle says Kept; the
//     sentry is killed, runsc's state dropped and the disk image released
//     (a restart mounts a new one).
//
// Recover finishes step 2 when the image is in place, whatever still runs
// (recoverKept), and undoes step 1 otherwise (recoverInterrupted, as for a
// pause). Restart deletes the image only once the new kernel has loaded it
// and its agent answers; a crash before that finds the image and stops the
// new kernel again: the sandbox is still stopped with its files, as the
// daemon's record says until the restart returns.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
	"github.com/warden-sandbox/warden/internal/crashpoint"
)

var _ backend.Restarter = (*Backend)(nil)

// fsManifest is the file a complete filesystem checkpoint has (gVisor's
// checkpointfiles.FSCheckpointManifestFileName).
const fsManifest = "fscheckpoint.pb"

// hasFSCheckpoint reports whether sandbox id has a complete filesystem
// checkpoint: it was stopped by StopKeep.
func (b *Backend) hasFSCheckpoint(id string) bool {
	_, err := os.Stat(filepath.Join(b.checkpoint(id), fsManifest))
	return err == nil
}

// specOf returns bx's spec, read from its run directory when this daemon
// did not create it (a recovered sandbox).
func (b *Backend) specOf(bx *box) (backend.Spec, error) {
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
	spec.Limits = spec.Limits.WithDefaults()
	bx.spec = spec
	return spec, nil
}

// StopKeep implements backend.Restarter.
func (b *Backend) StopKeep(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	if !b.fileOverlay() {
		return h, fmt.Errorf("%w: sandbox %s keeps its writable layer in gVisor's memory (no disk_dir or disk_overlay), which does not outlive its kernel", backend.ErrUnsupported, bx.id)
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.state.Kept || !bx.running() || bx.paused.Load() || bx.onDisk.Load() {
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	if _, err := b.specOf(bx); err != nil {
		return h, err
	}
	st := bx.state
	r := b.runscFor(st, 1)
	img, tmp := b.checkpoint(bx.id), b.checkpoint(bx.id)+".new"
	if err := markPausing(st); err != nil {
		return h, fmt.Errorf("stop %s keeping its files: %w", bx.id, err)
	}
	if _, err := r.run(ctx, "pause", bx.id); err != nil {
		clearPausing(st)
		return h, fmt.Errorf("stop %s keeping its files: %w", bx.id, err)
	}
	undo := func(cause error) (backend.Handle, error) {
		os.RemoveAll(tmp)
		if _, err := r.run(context.WithoutCancel(ctx), "resume", bx.id); err != nil {
			b.logf(bx, "resume after a failed filesystem checkpoint: %v", err)
		}
		clearPausing(st)
		return h, fmt.Errorf("stop %s keeping its files: %w", bx.id, cause)
	}
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return undo(err)
	}
	if _, err := r.run(ctx, "fscheckpoint", "--leave-running", "--image-path="+tmp, bx.id); err != nil {
		return undo(err)
	}
	// The spec goes with the image: after a reboot it rebuilds the run
	// directory (rebuild).
	if err := copyFileSync(filepath.Join(st.Dir, specFile), filepath.Join(tmp, specFile)); err != nil {
		return undo(err)
	}
	if err := syncDir(tmp); err != nil {
		return undo(err)
	}
	crashpoint.At(crashpoint.PauseBeforeRename)
	os.RemoveAll(img)
	if err := os.Rename(tmp, img); err != nil {
		return undo(err)
	}
	if err := syncPath(b.cfg.CheckpointDir); err != nil {
		b.logf(bx, "flush the checkpoint directory: %v", err)
	}
	// From here the image is the sandbox's writable layer (a crash now is
	// finished by Recover: the sandbox is stopped with its files).
	crashpoint.At(crashpoint.PauseBeforeRecord)
	nb := b.keep(bx)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.killSandbox(kctx, bx); err != nil {
		b.logf(bx, "kill the sentry after its filesystem checkpoint: %v", err)
	}
	if bx.pidfd >= 0 {
		unix.Close(bx.pidfd)
		bx.pidfd = -1
	}
	b.dropKernel(kctx, nb)
	clearPausing(st)
	return b.handle(nb), nil
}

// dropKernel frees what a stopped kernel of kept sandbox bx leaves: its
// processes (the host cgroup's), runsc's state and the disk image of its
// filestore (its data is in the filesystem checkpoint).
func (b *Backend) dropKernel(ctx context.Context, bx *box) {
	if cg, err := bx.group(); err == nil {
		for i := 0; i < 500; i++ {
			procs, err := cg.Procs()
			if err != nil || len(procs) == 0 {
				break
			}
			cg.Kill()
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := b.runscFor(bx.state, 1).run(ctx, "delete", "--force", bx.id); err != nil {
		b.logf(bx, "runsc delete after stopping the kernel: %v", err)
	}
	if err := b.releaseUpper(bx.id, bx.state); err != nil {
		b.logf(bx, "release the disk image of a stopped sandbox: %v", err)
	}
}

// keep replaces bx, whose kernel is ending or gone, by a stopped box of the
// same sandbox that holds its host resources (run directory, cgroup,
// network namespace) and whose writable layer is its filesystem checkpoint;
// it records it in the run directory and returns it. Callers that still
// hold bx see it end; lookups find the new box. The new box keeps bx's
// gone channel: event readers follow the sandbox across restarts.
func (b *Backend) keep(bx *box) *box {
	st := bx.state
	st.Pid, st.StartTime, st.OnDisk, st.Kept = 0, 0, false, true
	nb := &box{id: bx.id, state: st, spec: bx.spec, pidfd: -1, done: make(chan struct{}), gone: bx.gone}
	bx.cgMu.Lock()
	nb.cg = bx.cg
	bx.cgMu.Unlock()
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
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.state.Kept || bx.started {
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrAlreadyStart)
	}
	img := b.checkpoint(bx.id)
	if !b.hasFSCheckpoint(bx.id) {
		return h, fmt.Errorf("restart %s: its kept files (%s) are gone", bx.id, img)
	}
	if _, err := b.specOf(bx); err != nil {
		return h, err
	}
	if _, err := bx.group(); err != nil {
		return h, err
	}
	st := &bx.state
	// What the last boot left: runsc's state (a crash between the kill
	// and the delete), the control directory's sockets and markers (the
	// new init binds them anew).
	if m, _ := filepath.Glob(filepath.Join(b.cfg.RunDir, runscStateDir, bx.id+"_sandbox:*")); len(m) > 0 {
		b.runscFor(*st, 1).run(ctx, "delete", "--force", bx.id)
	}
	if err := clearDir(st.control()); err != nil {
		return h, fmt.Errorf("restart %s: %w", bx.id, err)
	}
	// The init removed its configuration in the kept layer at its first
	// boot: this boot reads it from the control directory (gwire).
	if err := copyFileSync(filepath.Join(st.scaffold(), strings.TrimPrefix(gwire.ConfigPath, "/")), filepath.Join(st.control(), gwire.RestartConfigName)); err != nil {
		return h, fmt.Errorf("restart %s: init config: %w", bx.id, err)
	}
	os.Remove(st.pidFile())
	if err := b.mountUpper(bx.id, *st); err != nil {
		return h, fmt.Errorf("restart %s: %w", bx.id, err)
	}
	st.Kept = false
	bx.fsRestore = img
	err = b.start(ctx, bx)
	bx.fsRestore = ""
	if err == nil {
		// Every page of the kept layer is in the new filestore before the
		// image goes.
		if _, werr := b.runscFor(*st, 1).run(ctx, "wait", "--fsrestore", bx.id); werr != nil {
			err = fmt.Errorf("load the kept files: %w", werr)
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			b.killSandbox(kctx, bx)
			cancel()
		}
	}
	if err != nil {
		// start killed what it began: the sandbox is stopped with its
		// files, as it was.
		if bx.pidfd >= 0 {
			unix.Close(bx.pidfd)
			bx.pidfd = -1
		}
		nb := b.keep(bx)
		b.dropKernel(context.WithoutCancel(ctx), nb)
		return h, fmt.Errorf("restart %s: %w", bx.id, err)
	}
	if err := os.RemoveAll(img); err != nil {
		b.logf(bx, "remove the filesystem checkpoint after a restart: %v", err)
	}
	return b.handle(bx), nil
}

// clearDir removes what dir holds.
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// recoverKept re-attaches, after a daemon restart, a sandbox whose
// filesystem checkpoint is in place: stopped by StopKeep, or with a kernel
// that a crash left running after the image was complete (StopKeep's
// kill, or a Restart that had not yet removed the image), which is
// stopped now. The image is the sandbox.
func (b *Backend) recoverKept(ctx context.Context, bx *box) error {
	if !b.hasFSCheckpoint(bx.id) {
		return errors.New("its kept files are gone")
	}
	if _, err := os.Stat(filepath.Join(bx.state.Dir, specFile)); err != nil {
		return errors.New("its spec is gone")
	}
	if _, err := bx.group(); err != nil {
		return err
	}
	b.dropKernel(ctx, bx)
	os.RemoveAll(b.checkpoint(bx.id) + ".new")
	bx.state.Pid, bx.state.StartTime, bx.state.OnDisk, bx.state.Kept = 0, 0, false, true
	bx.started = false
	b.saveState(bx)
	clearPausing(bx.state)
	return nil
}
