package hostproc

import (
	"os"
	"os/exec"
	"reflect"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
)

func TestStartTime(t *testing.T) {
	a, err := StartTime(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("own start time: %d %v", a, err)
	}
	if b, _ := StartTime(os.Getpid()); b != a {
		t.Fatalf("start time changed: %d then %d", a, b)
	}
	cmd := exec.Command("sleep", "0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Wait() // reaped: gone
	if _, err := StartTime(pid); err == nil {
		t.Fatalf("start time of exited process %d: no error", pid)
	}
}

func TestHandleRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadHandle(dir); err == nil {
		t.Fatal("reading a missing handle succeeded")
	}
	h := backend.Handle{Version: backend.HandleVersion, Backend: "native", ID: "sb-x", Data: []byte(`{"pid":7}`)}
	WriteHandle(dir, h)
	got, err := ReadHandle(dir)
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("read back %+v %v, want %+v", got, err, h)
	}
	os.WriteFile(dir+"/"+HandleFile, []byte("{"), 0o600)
	if _, err := ReadHandle(dir); err == nil {
		t.Fatal("a truncated handle decoded")
	}
}
