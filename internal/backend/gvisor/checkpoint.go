package gvisor

// Pause, resume and fork with memory.
//
// Pause checkpoints the sandbox to disk and ends its sentry, so its memory
// goes back to the host; Resume restores it from that checkpoint under the
// same id, with its processes, their memory, open files and in-sandbox
// sockets, and its writable layers. The writable layers in gVisor's memory
// are saved with it; so is the writable layer of "/" when it is a host file
// (Config.DiskDir or DiskOverlay): runsc checkpoint copies that filestore's
// pages into the image (pkg/sentry/kernel savePrivateMFs) and runsc restore
// loads them into a new filestore that it creates in the overlay's
// directory (runsc/boot createPrivateMemoryFile). So a paused sandbox's
// disk image is released (its data is in the checkpoint) and the resume
// mounts a new one, and each fork gets its own image and its own copy of
// the source's files. The sequence, made so that a failure never leaves a
// sandbox half-paused:
//
//  1. The agent lets go of its host sockets (gVisor cannot save them; see
//     ginit/suspend.go). Every connection to the agent ends here: clients
//     reconnect after the resume, and streams they followed (a running
//     command's output) must be reattached (process Connect).
//  2. runsc pause stops every task, then runsc checkpoint --leave-running
//     writes the image into Dir/checkpoint.new. Left running, the kernel
//     stays paused, so nothing runs between the image and the kill.
//  3. Only once the image is complete is it renamed to Dir/checkpoint and
//     the handle (handle.json) says so; then the sentry is killed and
//     runsc's state dropped.
//
// If 2 fails, the sandbox is resumed and the agent listens again: it is
// running, as before. Resume runs runsc restore from Dir/checkpoint, tells
// the agent to listen (SIGUSR2) and waits for it; it deletes the image only
// once the agent answers. If it fails, whatever started is killed and the
// image stays for a retry.
//
// A daemon crash anywhere in that sequence is made good at the next start:
// the sandbox's run directory holds a "pausing" marker from before step 1
// until the sandbox is on disk with its handle saying so (or running
// again), and Recover finishes the pause if the image was renamed into
// place, undoes it if the sentry still runs (recoverInterrupted), and
// reports the sandbox lost, cleaned up, if neither.
//
// Fork (Snapshot, then Create and StartFrom for each new sandbox) writes the same image into
// a snapshot directory while the source keeps running, and restores it into
// new sandboxes, each with its own run directory, host cgroup, writable
// layers (restored from the image, so copies) and a fresh sentry. gVisor's
// getrandom(2) and /dev/urandom read the host's kernel on every call, so
// forks never share random output; random state a program keeps itself
// (a seeded PRNG) is copied with its memory, as in any fork.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
	"github.com/warden-sandbox/warden/internal/backend/hostproc"
	"github.com/warden-sandbox/warden/internal/crashpoint"
)

var _ backend.Snapshotter = (*Backend)(nil)

// checkpoint is where sandbox id's checkpoint lives while it is paused.
func (b *Backend) checkpoint(id string) string { return filepath.Join(b.cfg.CheckpointDir, id) }

// specFile is the sandbox's Spec in its run directory and in its
// checkpoint: after a host reboot, the checkpoint's copy rebuilds the run
// directory.
const specFile = "spec.json"

// dropCheckpoint removes sandbox id's checkpoint (and a half-written one).
func (b *Backend) dropCheckpoint(id string) error {
	return errors.Join(os.RemoveAll(b.checkpoint(id)), os.RemoveAll(b.checkpoint(id)+".new"))
}

// snapshotDir holds forkable snapshots, one directory each.
const snapshotDir = ".snapshots"

// suspendAgent asks the agent to close its host sockets and waits until it
// has.
func (b *Backend) suspendAgent(ctx context.Context, st handleData) error {
	marker := filepath.Join(st.control(), gwire.SuspendedName)
	os.Remove(marker)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			// SuspendPath is on the init's own socket, never on the agent's
			// (which the daemon relays client requests to). An init booted
			// by an older Warden (a sandbox restored from its image) has
			// none and serves it on the agent's.
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", filepath.Join(st.control(), gwire.ControlSocketName))
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
				return d.DialContext(ctx, "unix", st.socket())
			}
			return c, err
		}}, Timeout: 5 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent"+gwire.SuspendPath, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("suspend agent: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("suspend agent: %s", resp.Status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The marker stays until the agent listens again (wakeAgent).
		if _, err := os.Stat(marker); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("suspend agent: it did not close its sockets within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// wakeAgent tells a suspended agent to listen again and waits until it
// does: it removes the suspended marker once its sockets are bound, and a
// connection made before that could reach a socket nobody accepts on.
func (b *Backend) wakeAgent(ctx context.Context, bx *box) error {
	if _, err := b.runscFor(bx.state, 1).run(ctx, "kill", bx.id, "USR2"); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	marker := filepath.Join(bx.state.control(), gwire.SuspendedName)
	for {
		if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the agent did not listen again: %w: %s", wctx.Err(), b.logTail(bx.state))
		case <-bx.exited:
			return fmt.Errorf("the sandbox exited: %s", b.logTail(bx.state))
		case <-time.After(time.Millisecond):
		}
	}
	return b.waitAgent(wctx, bx)
}

// writeImage checkpoints the running sandbox into dir, leaving it paused:
// the agent suspended, every task stopped. On failure it is running again.
// It leaves the pausing marker (see Recover) for the caller to clear once
// the sandbox is either on disk or running again.
func (b *Backend) writeImage(ctx context.Context, bx *box, dir string) (err error) {
	r := b.runscFor(bx.state, 1)
	if err := markPausing(bx.state); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			clearPausing(bx.state) // after undoPause (deferred later, run first)
		}
	}()
	if err := b.suspendAgent(ctx, bx.state); err != nil {
		b.wakeAgent(context.WithoutCancel(ctx), bx)
		return err
	}
	crashpoint.At(crashpoint.PauseAfterSuspend)
	if _, err := r.run(ctx, "pause", bx.id); err != nil {
		b.wakeAgent(context.WithoutCancel(ctx), bx)
		return err
	}
	defer func() {
		if err != nil {
			b.undoPause(ctx, bx)
		}
	}()
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	args := []string{"checkpoint", "--leave-running", "--compression=none", "--image-path=" + dir, bx.id}
	if crashpoint.Armed(crashpoint.PauseMidCheckpoint) {
		crashMidCheckpoint(r, dir, args)
	}
	if _, err := r.run(ctx, args...); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(dir); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// undoPause resumes a sandbox writeImage left stopped and wakes its agent:
// it runs as before.
func (b *Backend) undoPause(ctx context.Context, bx *box) {
	rctx := context.WithoutCancel(ctx)
	b.runscFor(bx.state, 1).run(rctx, "resume", bx.id)
	b.wakeAgent(rctx, bx)
}

// pausingName is the marker of a pause (or snapshot) in progress, in the
// sandbox's run directory: written before the agent is asked to suspend,
// removed once the sandbox is on disk with its handle saying so, or running
// again. A daemon crash leaves it, and Recover then finishes or undoes the
// pause (see recoverInterrupted).
const pausingName = "pausing"

func (st handleData) pausing() string { return filepath.Join(st.Dir, pausingName) }

// markPausing writes the pausing marker and flushes it with its directory.
func markPausing(st handleData) error {
	f, err := os.OpenFile(st.pausing(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	d, err := os.Open(st.Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func clearPausing(st handleData) { os.Remove(st.pausing()) }

// crashMidCheckpoint is the test hook crashpoint.PauseMidCheckpoint: it
// starts runsc checkpoint, waits until runsc has created the image's files
// (it then hands them to the sentry, which writes the image), and SIGKILLs
// runsc and the daemon at once, as systemd ends a crashed unit's cgroup.
func crashMidCheckpoint(r runsc, dir string, args []string) {
	cmd := r.command(context.Background(), args...)
	if err := cmd.Start(); err == nil {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if st, err := os.Stat(filepath.Join(dir, "pages.img")); err == nil && st.Size() > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cmd.Process.Kill()
	}
	crashpoint.Crash()
}

// recoverInterrupted finishes or undoes, after a daemon restart, a pause or
// snapshot the daemon's stop interrupted while the sandbox's sentry (still
// alive: the caller checked) was being checkpointed. Where the crash can
// have landed, and what is left:
//
//   - after the marker, before or during the agent's suspension: the agent
//     serves, is closing its host sockets, or has closed them;
//   - after runsc pause: the kernel is stopped too (runsc state "paused");
//   - during runsc checkpoint: the sentry writes the image itself through
//     descriptors runsc passed it, so it finishes the image (or fails) even
//     when runsc died with the daemon; its own pause ends with the save,
//     runsc pause's does not;
//   - after the image is complete, before it is renamed into place: as
//     above, with a complete image in Dir.new that nobody vouched for.
//
// (Once the image is renamed into place, Recover finishes the pause
// instead: see recoverOnDisk.) Here the sandbox is rolled back: wait for a
// save still writing, resume the kernel if runsc paused it, bring the
// agent to its suspended state and wake it as a resume does, and drop the
// partial image. On error the caller ends the sandbox.
func (b *Backend) recoverInterrupted(ctx context.Context, bx *box, paused bool) error {
	st := bx.state
	if !b.waitSave(ctx, st.Pid, 2*time.Minute) {
		return errors.New("the sentry was still writing a checkpoint after 2 minutes")
	}
	if paused {
		if _, err := b.runscFor(st, 1).run(ctx, "resume", bx.id); err != nil {
			return err
		}
	}
	if err := b.reviveAgent(ctx, bx); err != nil {
		return err
	}
	if err := os.RemoveAll(b.checkpoint(bx.id) + ".new"); err != nil {
		return fmt.Errorf("remove the partial checkpoint: %w", err)
	}
	clearPausing(st)
	return nil
}

// waitSave waits until the sentry pid holds no file of a checkpoint image
// open (gVisor closes them when its save ends), at most limit; it reports
// whether it got there.
func (b *Backend) waitSave(ctx context.Context, pid int, limit time.Duration) bool {
	prefixes := []string{filepath.Clean(b.cfg.CheckpointDir) + "/", filepath.Join(b.cfg.RunDir, snapshotDir) + "/", filepath.Clean(b.cfg.KeptSnapshotDir) + "/"}
	deadline := time.Now().Add(limit)
	for {
		if !holdsUnder(pid, prefixes) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdsUnder reports whether process pid has a file under one of prefixes
// open (deleted ones included).
func holdsUnder(pid int, prefixes []string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				return true
			}
		}
	}
	return false
}

// reviveAgent makes the agent of a running sandbox listen again whatever a
// crash left it doing: serving, in the middle of a suspension, or
// suspended. A wake (SIGUSR2) is lost on an agent that has accepted a
// suspension but not yet started it, so the agent is first brought to the
// suspended state, then woken as a resume does.
func (b *Backend) reviveAgent(ctx context.Context, bx *box) error {
	marker := filepath.Join(bx.state.control(), gwire.SuspendedName)
	if _, err := os.Stat(marker); err != nil {
		if err := b.suspendAgent(ctx, bx.state); err != nil {
			// Refused: a suspension is under way (its listener is
			// closed); it ends with the marker.
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, err := os.Stat(marker); err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("the agent is neither serving nor suspended: %w", err)
				}
				time.Sleep(time.Millisecond)
			}
		}
	} else if healthy(ctx, bx.state.socket()) {
		// It listened again just before the crash and had not yet removed
		// the marker.
		os.Remove(marker)
		return nil
	}
	return b.wakeAgent(ctx, bx)
}

// syncDir flushes a directory's files and the directory itself to disk,
// and drops the files from the page cache.
func syncDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = f.Sync()
		if err == nil {
			// Out of the page cache, which the sandbox's cgroup is
			// charged for: a paused sandbox holds no memory.
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Pause implements backend.Pauser: the sandbox is checkpointed to disk and
// its sentry ends, releasing its memory.
func (b *Backend) Pause(ctx context.Context, h backend.Handle) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.running() || bx.paused.Load() {
		return fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	tmp := b.checkpoint(bx.id) + ".new"
	if err := b.writeImage(ctx, bx, tmp); err != nil {
		return err
	}
	// The spec goes with the image: after a reboot it rebuilds the run
	// directory.
	if err := copyFileSync(filepath.Join(bx.state.Dir, specFile), filepath.Join(tmp, specFile)); err != nil {
		os.RemoveAll(tmp)
		b.undoPause(ctx, bx)
		clearPausing(bx.state)
		return fmt.Errorf("checkpoint: %w", err)
	}
	crashpoint.At(crashpoint.PauseBeforeRename)
	// From here the image is the sandbox (a crash now is finished by
	// Recover: the sandbox is paused).
	os.RemoveAll(b.checkpoint(bx.id))
	if err := os.Rename(tmp, b.checkpoint(bx.id)); err != nil {
		os.RemoveAll(tmp)
		b.undoPause(ctx, bx)
		clearPausing(bx.state)
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncPath(b.cfg.CheckpointDir); err != nil {
		b.logf(bx, "flush the checkpoint directory: %v", err)
	}
	crashpoint.At(crashpoint.PauseBeforeRecord)
	bx.onDisk.Store(true)
	bx.paused.Store(true)
	bx.state.OnDisk = true
	b.saveState(bx)
	// End the sentry; watch sees onDisk and keeps the sandbox.
	if bx.pidfd >= 0 {
		unix.PidfdSendSignal(bx.pidfd, unix.SIGKILL, nil, 0)
	}
	if cg, err := bx.group(); err == nil {
		cg.Kill()
	}
	select {
	case <-bx.exited:
	case <-time.After(10 * time.Second):
		b.logf(bx, "checkpointed sentry still alive after 10s")
	}
	if bx.pidfd >= 0 {
		unix.Close(bx.pidfd)
		bx.pidfd = -1
	}
	if _, err := b.runscFor(bx.state, 1).run(context.WithoutCancel(ctx), "delete", "--force", bx.id); err != nil {
		b.logf(bx, "runsc delete after checkpoint: %v", err)
	}
	// The writable layer is in the image now: its disk goes back to the
	// host until the resume mounts a new one.
	if err := b.releaseUpper(bx.id, bx.state); err != nil {
		b.logf(bx, "release the disk image after checkpoint: %v", err)
	}
	clearPausing(bx.state)
	return nil
}

// syncPath flushes a directory's entries.
func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Resume implements backend.Pauser: restore from the checkpoint.
func (b *Backend) Resume(ctx context.Context, h backend.Handle) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.onDisk.Load() {
		return fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	select {
	case <-bx.done:
		return fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	default:
	}
	if err := b.restore(ctx, bx, b.checkpoint(bx.id)); err != nil {
		return err
	}
	bx.onDisk.Store(false)
	bx.paused.Store(false)
	bx.state.OnDisk = false
	b.saveState(bx)
	os.RemoveAll(b.checkpoint(bx.id))
	return nil
}

// restore boots bx's sentry from the image in dir and waits for its agent.
// On failure nothing of the attempt is left running and dir is untouched.
func (b *Backend) restore(ctx context.Context, bx *box, dir string) (err error) {
	st := &bx.state
	r := b.runscFor(*st, st.DiskBytes)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	// A sentry from an attempt a crash interrupted.
	if m, _ := filepath.Glob(filepath.Join(b.cfg.RunDir, runscStateDir, bx.id+"_sandbox:*")); len(m) > 0 {
		r.run(rctx, "delete", "--force", bx.id)
	}

	if err := b.checkVolumes(bx); err != nil {
		return fmt.Errorf("restore %s: %w", bx.id, err)
	}
	// A file-backed writable layer is restored into a new filestore, which
	// runsc creates in st.upper(): a fresh disk image for it.
	if err := b.mountUpper(bx.id, *st); err != nil {
		return fmt.Errorf("restore %s: %w", bx.id, err)
	}
	os.Remove(st.pidFile()) // the last boot's; runsc writes it anew
	logf, err := os.OpenFile(st.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox log: %w", err)
	}
	defer logf.Close()
	args := append(append([]string{}, r.flags...), "--log="+filepath.Join(st.Dir, "runsc.log"),
		"restore", "--detach", "--background", "--pid-file="+st.pidFile(), "--image-path="+dir, "--bundle="+st.bundle(), bx.id)
	cmd := exec.CommandContext(rctx, r.path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		r.run(context.WithoutCancel(ctx), "delete", "--force", bx.id)
		return fmt.Errorf("restore %s: runsc restore: %v: %s", bx.id, err, b.logTail(*st))
	}
	fail := func(e error) error {
		kctx := context.WithoutCancel(ctx)
		if cg, err := bx.group(); err == nil {
			cg.Kill()
		}
		r.run(kctx, "delete", "--force", bx.id)
		return fmt.Errorf("restore %s: %w", bx.id, e)
	}
	cs, err := readPidFile(st.pidFile())
	if err != nil {
		return fail(err)
	}
	start, err := hostproc.StartTime(cs.Pid)
	if err != nil {
		return fail(err)
	}
	pidfd, err := unix.PidfdOpen(cs.Pid, 0)
	if err != nil {
		return fail(fmt.Errorf("pidfd: %w", err))
	}
	if t, err := hostproc.StartTime(cs.Pid); err != nil || t != start {
		unix.Close(pidfd)
		return fail(errors.New("the restored sandbox exited: " + b.logTail(*st)))
	}
	exited := make(chan struct{})
	bx.pidfd, bx.exited = pidfd, exited
	st.Pid, st.StartTime = cs.Pid, start
	go bx.watch(pidfd, exited)
	if err := b.wakeAgent(rctx, bx); err != nil {
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		e := fail(err)
		<-exited
		unix.Close(pidfd)
		bx.pidfd = -1
		return e
	}
	go b.watchMemory(bx, exited)
	return nil
}

// hasCheckpoint reports whether sandbox id has a complete checkpoint.
func (b *Backend) hasCheckpoint(id string) bool {
	_, err := os.Stat(filepath.Join(b.checkpoint(id), "checkpoint.img"))
	return err == nil
}

// copyFileSync copies src to dst (0600) and flushes it.
func copyFileSync(src, dst string) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rebuild makes a checkpointed sandbox's run directory, mounts and cgroup
// anew from the spec kept with its checkpoint (after a host reboot took
// them), and registers it as paused on disk.
func (b *Backend) rebuild(ctx context.Context, id string) error {
	raw, err := os.ReadFile(filepath.Join(b.checkpoint(id), specFile))
	if err != nil {
		return fmt.Errorf("read the checkpoint's spec: %w", err)
	}
	var spec backend.Spec
	if err := json.Unmarshal(raw, &spec); err != nil || spec.ID != id {
		return fmt.Errorf("the checkpoint's spec is unreadable or not %s's", id)
	}
	h, err := b.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if b.hasFSCheckpoint(id) {
		// Stopped with its files kept (coldrestart.go): Restart mounts a
		// disk image again.
		if err := b.releaseUpper(id, bx.state); err != nil {
			b.cleanup(context.WithoutCancel(ctx), bx.state, id)
			b.forget(bx)
			return fmt.Errorf("rebuild: %w", err)
		}
		bx.state.Kept = true
		b.saveState(bx)
		return nil
	}
	bx.started = true
	if err := plantControl(bx.state.control()); err != nil {
		b.cleanup(context.WithoutCancel(ctx), bx.state, id)
		b.forget(bx)
		return fmt.Errorf("rebuild: %w", err)
	}
	bx.onDisk.Store(true)
	bx.paused.Store(true)
	bx.state.OnDisk = true
	bx.exited = make(chan struct{})
	close(bx.exited)
	b.saveState(bx)
	return nil
}

// logf notes a backend problem in the sandbox's log.
func (b *Backend) logf(bx *box, format string, args ...any) {
	f, err := os.OpenFile(bx.state.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "wardend: "+format+"\n", args...)
	f.Close()
}

// snapshotData is a snapshot's reference data.
type snapshotData struct {
	Dir string `json:"dir"`
	// Layers are the source's template layers: a restore must present the
	// same mounts.
	Layers []backend.Layer `json:"layers"`
}

// Snapshot implements backend.Snapshotter: an image of the running sandbox
// for Restore, which keeps running (a pause of the time it takes to write
// its memory, and its agent connections end as for Pause).
func (b *Backend) Snapshot(ctx context.Context, h backend.Handle) (backend.SnapshotRef, error) {
	return b.snapshotIn(ctx, h, filepath.Join(b.cfg.RunDir, snapshotDir))
}

// snapshotIn is Snapshot writing the image under root (keep.go).
func (b *Backend) snapshotIn(ctx context.Context, h backend.Handle, root string) (backend.SnapshotRef, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return backend.SnapshotRef{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.running() || bx.paused.Load() {
		return backend.SnapshotRef{}, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	if spec, err := b.specOf(bx); err != nil {
		return backend.SnapshotRef{}, err
	} else if len(spec.Volumes) > 0 {
		return backend.SnapshotRef{}, fmt.Errorf("%w: sandbox %s has volumes, which its forks cannot share", backend.ErrUnsupported, bx.id)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	id := "snap-" + hex.EncodeToString(rnd[:])
	if err := os.MkdirAll(root, 0o700); err != nil {
		return backend.SnapshotRef{}, fmt.Errorf("snapshot: %w", err)
	}
	dir := filepath.Join(root, id)
	if err := b.writeImage(ctx, bx, dir); err != nil {
		return backend.SnapshotRef{}, err
	}
	r := b.runscFor(bx.state, 1)
	rctx := context.WithoutCancel(ctx)
	if _, err := r.run(rctx, "resume", bx.id); err != nil {
		os.RemoveAll(dir)
		return backend.SnapshotRef{}, fmt.Errorf("resume after snapshot: %w", err)
	}
	if err := b.wakeAgent(rctx, bx); err != nil {
		os.RemoveAll(dir)
		return backend.SnapshotRef{}, fmt.Errorf("resume after snapshot: %w", err)
	}
	clearPausing(bx.state)
	raw, _ := json.Marshal(snapshotData{Dir: dir, Layers: bx.state.Layers})
	return backend.SnapshotRef{ID: id, Data: raw}, nil
}

// PurgeSnapshots removes every snapshot: call it when no fork can be in
// flight (wardend does at start, for snapshots a crash left).
func (b *Backend) PurgeSnapshots() error {
	return os.RemoveAll(filepath.Join(b.cfg.RunDir, snapshotDir))
}

// DeleteSnapshot implements backend.Snapshotter: it removes the image.
func (b *Backend) DeleteSnapshot(ctx context.Context, ref backend.SnapshotRef) error {
	var sd snapshotData
	if err := json.Unmarshal(ref.Data, &sd); err != nil {
		return fmt.Errorf("snapshot %s: %w", ref.ID, err)
	}
	if !b.ownSnapshotDir(sd.Dir) {
		return fmt.Errorf("snapshot %s: refusing to remove %q", ref.ID, sd.Dir)
	}
	return os.RemoveAll(sd.Dir)
}

// StartFrom implements backend.Snapshotter: it starts a created sandbox
// (Create with its own id and host-side limits; its template layers must
// be the snapshot's) from the snapshot instead of booting it. The
// processes, memory, files and kernel-side settings (the in-sandbox limits,
// hostname, env of running processes) are the source's. A sandbox created
// with Spec.Network has its devices set up before, as for Start; its kernel
// keeps the source's addresses, which are the same in every sandbox.
func (b *Backend) StartFrom(ctx context.Context, h backend.Handle, ref backend.SnapshotRef) (backend.Handle, error) {
	var sd snapshotData
	if err := json.Unmarshal(ref.Data, &sd); err != nil {
		return h, fmt.Errorf("%w: snapshot %s: %w", backend.ErrInvalidSpec, ref.ID, err)
	}
	if !b.ownSnapshotDir(sd.Dir) {
		return h, fmt.Errorf("%w: snapshot %s is not this backend's", backend.ErrInvalidSpec, ref.ID)
	}
	if _, err := os.Stat(filepath.Join(sd.Dir, "checkpoint.img")); err != nil {
		return h, fmt.Errorf("snapshot %s: %w", ref.ID, err)
	}
	bx, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.started {
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrAlreadyStart)
	}
	if !sameLayers(sd.Layers, bx.state.Layers) {
		return h, fmt.Errorf("%w: a sandbox started from snapshot %s must have its source's template layers", backend.ErrInvalidSpec, ref.ID)
	}
	bx.started = true
	// gVisor restores the source's control directory entries it had
	// looked up: the OOM counter (held open) and the two socket files.
	if err := plantControl(bx.state.control()); err != nil {
		return h, fmt.Errorf("start %s from a snapshot: %w", bx.id, err)
	}
	if err := b.restore(ctx, bx, sd.Dir); err != nil {
		return h, err
	}
	b.saveState(bx)
	return b.handle(bx), nil
}

// plantControl creates what a restored image expects in the control
// directory: the OOM counter and the agent's, the init's and the watchdog's
// socket files (bound and closed here; the init binds them anew), and the suspended
// marker, which the agent removes once it listens.
func plantControl(dir string) error {
	for _, name := range []string{gwire.OOMFileName, gwire.SuspendedName} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
	}
	for _, name := range []string{gwire.SocketName, gwire.ControlSocketName, gwire.WatchdogSocketName} {
		ln, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			return err
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
	}
	return nil
}

func sameLayers(a, b []backend.Layer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if filepath.Clean(a[i].Path) != filepath.Clean(b[i].Path) || a[i].Target != b[i].Target {
			return false
		}
	}
	return true
}

// recoverOnDisk re-attaches a checkpointed sandbox after a daemon restart.
// A sentry a crash left half-restored is ended: the image is the sandbox.
func (b *Backend) recoverOnDisk(ctx context.Context, bx *box) error {
	if !b.hasCheckpoint(bx.id) {
		return errors.New("its checkpoint is gone")
	}
	if cg, err := bx.group(); err != nil {
		return err
	} else {
		cg.Kill()
	}
	b.runscFor(bx.state, 1).run(ctx, "delete", "--force", bx.id)
	// A pause the crash interrupted after its image was in place is
	// finished here: the image is complete, its sentry is gone now.
	os.RemoveAll(b.checkpoint(bx.id) + ".new")
	bx.state.Pid, bx.state.StartTime = 0, 0
	bx.state.OnDisk = true
	bx.onDisk.Store(true)
	bx.paused.Store(true)
	bx.exited = make(chan struct{})
	close(bx.exited)
	b.saveState(bx)
	clearPausing(bx.state)
	return nil
}
