// Package crashpoint lets tests kill wardend at a named point of a
// multi-step operation, to check that the next start recovers from a crash
// there. A point is armed by the environment variable WARDEN_TEST_CRASH_AT
// (one name); an armed point SIGKILLs the daemon, as a crash or the OOM
// killer would: no deferred function, no cleanup runs.
//
// The variable is for tests only. It can do nothing an operator who sets
// wardend's environment could not do anyway (kill wardend), and unset it
// costs one string comparison per point.
package crashpoint

import (
	"os"
	"syscall"
)

// Env is the environment variable that arms a point.
const Env = "WARDEN_TEST_CRASH_AT"

// armed is the point named in Env when the process started.
var armed = os.Getenv(Env)

// Points, by the operation they interrupt.
const (
	// PauseAfterSuspend: the gvisor backend's agent has closed its host
	// sockets; the kernel still runs.
	PauseAfterSuspend = "pause-after-suspend"
	// PauseMidCheckpoint: runsc checkpoint is writing the image (the
	// sandbox's kernel is stopped). runsc is killed with the daemon, as
	// systemd kills a crashed unit's cgroup; the sentry, in the sandbox's
	// cgroup, is not.
	PauseMidCheckpoint = "pause-mid-checkpoint"
	// PauseBeforeRename: the image is complete in its temporary directory.
	PauseBeforeRename = "pause-before-rename"
	// PauseBeforeRecord: the image is in place; the backend has not yet
	// recorded the sandbox as checkpointed nor ended its sentry.
	PauseBeforeRecord = "pause-before-record"
	// PauseBeforeStore: the backend paused the sandbox; the store still
	// says running.
	PauseBeforeStore = "pause-before-store"
)

// Armed reports whether point name is armed.
func Armed(name string) bool { return armed != "" && armed == name }

// At kills the daemon if point name is armed.
func At(name string) {
	if Armed(name) {
		Crash()
	}
}

// Crash kills the daemon at once with SIGKILL.
func Crash() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered before this returns to user code; never go on
}
