package process

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/warden-sandbox/warden/internal/agentpb/process"
)

// TestPTYExitNotHungUp: a terminal program that exits by itself (cat at end
// of input) reports its own exit status. The master reads EIO as soon as the
// program's exit closed its files; closing the master then would hang up the
// terminal, and the kernel's SIGHUP to the session leader, still exiting,
// would replace its status (it did in about a third of runs). The program is
// the session leader itself, as `warden exec -it ID -- cat` starts it.
func TestPTYExitNotHungUp(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		for i := range 40 {
			req := startReq("/bin/cat")
			req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Rows: 24, Cols: 80}}
			s, err := e.client.Start(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			sr := newReader(t, s)
			sr.until(func(r *result) bool { return r.pid != 0 })
			for _, in := range []string{"abc\n", "\x04"} {
				if _, err := e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
					Process: pidSel(sr.r.pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(in)}}})); err != nil {
					t.Fatalf("send input: %v", err)
				}
			}
			r := sr.all()
			if r.end == nil || !r.end.Exited || r.end.ExitCode != 0 {
				t.Fatalf("run %d: end %v (output %q), want exit status 0", i, r.end, r.pty.String())
			}
		}
	})
}
