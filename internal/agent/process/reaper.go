package process

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// reapPoll is a fallback: the reaper also looks for exited children this
// often, in case a SIGCHLD was ever missed (they coalesce, and one sent before
// signal.Notify took effect is lost).
const reapPoll = 5 * time.Second

// reaper is the one central reaper of the agent. Exit statuses are process
// wide (any wait4(-1) may collect any child), so there is exactly one per OS
// process, shared by every Service: a goroutine woken by SIGCHLD that loops
// wait4(-1, WNOHANG) and hands each status to the tracked process with that
// pid. Untracked children (orphans reparented to PID 1 or to a subreaper,
// double-forked daemons) are simply reaped so they never linger as zombies.
//
// Consequence: nothing else in the same OS process may wait for its own
// children (os/exec's Cmd.Wait, os.Process.Wait): the reaper may collect them
// first and Wait then fails with ECHILD.
var reaper struct {
	once  sync.Once
	mu    sync.Mutex                       // held across fork+register and around dispatch lookup
	procs map[int]func(syscall.WaitStatus) // pid -> exit callback
}

// startReaper installs the SIGCHLD handler and starts the reaper goroutine,
// once per OS process. It must run before the first child is forked.
func startReaper() {
	reaper.once.Do(func() {
		reaper.procs = map[int]func(syscall.WaitStatus){}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go reapLoop(ch)
	})
}

func reapLoop(ch <-chan os.Signal) {
	t := time.NewTicker(reapPoll)
	defer t.Stop()
	for {
		reapAll()
		select {
		case <-ch:
		case <-t.C:
		}
	}
}

// reapAll collects every child that has exited so far.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD: no children; 0: none exited yet
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped/continued: not requested (no WUNTRACED), ignore
		}
		// Taking the lock waits out a spawn in progress, so a child that exits
		// before its parent has registered it is still dispatched.
		reaper.mu.Lock()
		fn := reaper.procs[pid]
		delete(reaper.procs, pid)
		reaper.mu.Unlock()
		if fn != nil {
			fn(ws)
		}
	}
}

// SpawnThreadSetup, when set before the first process starts, runs once on
// the dedicated OS thread that every child is forked from. A child inherits
// the per-thread state of the thread that forks it (capability bounding,
// inheritable and ambient sets, Landlock domain, no_new_privs), so the
// sandbox init uses this to give every user process an empty bounding set
// and one Landlock domain without changing the agent's other threads. If it
// fails, every start fails with its error.
var SpawnThreadSetup func() error

var spawner struct {
	once sync.Once
	reqs chan func()
	err  error
}

// onSpawnThread runs fn on the spawn thread and waits for it.
func onSpawnThread(fn func()) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		ready := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread carries the child state
			var err error
			if SpawnThreadSetup != nil {
				err = SpawnThreadSetup()
			}
			ready <- err
			if err != nil {
				return // the locked thread exits with this goroutine
			}
			for f := range spawner.reqs {
				f()
			}
		}()
		spawner.err = <-ready
	})
	if spawner.err != nil {
		return fmt.Errorf("prepare spawn thread: %w", spawner.err)
	}
	done := make(chan struct{})
	spawner.reqs <- func() { fn(); close(done) }
	<-done
	return nil
}

// forkExec starts a child with syscall.ForkExec from the spawn thread and
// registers onExit for its pid atomically with respect to the reaper.
func forkExec(path string, argv []string, attr *syscall.ProcAttr, onExit func(syscall.WaitStatus)) (int, error) {
	startReaper()
	var pid int
	var err error
	if serr := onSpawnThread(func() {
		reaper.mu.Lock()
		defer reaper.mu.Unlock()
		pid, err = syscall.ForkExec(path, argv, attr)
		if err == nil {
			reaper.procs[pid] = onExit
		}
	}); serr != nil {
		return 0, serr
	}
	if err != nil {
		return 0, err
	}
	preferForOOM(pid)
	return pid, nil
}

// ChildOOMScoreAdj is written to every child's oom_score_adj. When the
// sandbox hits its memory limit the OOM killer then picks a user process,
// never the agent (PID 1, left at 0), even when the memory is held by
// something no process's RSS shows (memfd or tmpfs pages): the sandbox
// survives its own memory bomb. Raising the value needs no privilege.
const ChildOOMScoreAdj = "500"

// preferForOOM marks a child as the OOM killer's preferred victim. Errors
// are ignored: outside a sandbox (tests) /proc may refuse, and a child that
// already exited has nothing to mark.
func preferForOOM(pid int) {
	if os.Getpid() != 1 {
		return // only the sandbox init protects itself this way
	}
	os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(ChildOOMScoreAdj), 0)
}

// PrepareSpawnThread starts the spawn thread now and returns the error of
// SpawnThreadSetup, so a sandbox init fails at start rather than at the
// first command.
func PrepareSpawnThread() error { return onSpawnThread(func() {}) }
