package crashpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestAt runs this test binary again with a point armed: At the armed point
// kills it with SIGKILL, at any other point it goes on.
func TestAt(t *testing.T) {
	if os.Getenv("CRASHPOINT_CHILD") != "" {
		At(PauseBeforeStore) // not armed: goes on
		At(PauseAfterSuspend)
		os.Exit(3) // not reached
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAt$")
	cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", Env+"="+PauseAfterSuspend)
	err := cmd.Run()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v (%v), want SIGKILL at %s", cmd.ProcessState, err, PauseAfterSuspend)
	}
}

func TestArmed(t *testing.T) {
	defer func(a string) { armed = a }(armed)
	armed = ""
	if Armed("") || Armed(PauseBeforeRecord) {
		t.Fatal("a point is armed with the variable unset")
	}
	armed = PauseBeforeRecord
	if !Armed(PauseBeforeRecord) || Armed(PauseBeforeRename) || Armed("pause-before") {
		t.Fatal("Armed matches other than the exact name")
	}
}
