package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/fake"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

// coldTemplate is a base template with a start command that appends a
// line to starts.log in the user's home on every boot.
type coldTemplate struct{}

func (coldTemplate) Get(name string) (*template.Template, error) {
	if name != template.BaseName && name != "base:cold" {
		return nil, template.ErrUnknown
	}
	return &template.Template{Name: template.BaseName, ID: "base:cold", User: "user", Workdir: "/home/user",
		Layers: []backend.Layer{{Target: "/", Path: "/"}},
		Start: &template.Start{Cmd: []string{"sh", "-c", "echo boot >> starts.log; exec sleep 600"},
			Ready: &template.Ready{Cmd: []string{"grep", "-q", "boot", "starts.log"}}},
	}, nil
}

// sh runs script in sandbox id through the manager's agent client.
func coldSh(t *testing.T, m *Manager, id, script string) string {
	t.Helper()
	c, err := m.Agent(context.Background(), id)
	if err != nil {
		t.Fatalf("agent of %s: %v", id, err)
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Run(ctx, agentclient.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: exit %d, %v: %s", script, res.ExitCode, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func alivePid(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.EPERM)
	}
	// A zombie is gone for our purposes.
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestColdPause checks E2B's filesystem-only pause on the fake backend:
// after PauseCold and Resume the sandbox's files are there, its processes
// (a background one, its agent) are not, the template's start command ran
// again; a daemon restart while it is cold-paused keeps it paused and
// resumable; kill then leaves nothing.
func TestColdPause(t *testing.T) {
	ctx := context.Background()
	stateDir, err := os.MkdirTemp("", "cold-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	os.Chmod(stateDir, 0o755)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "p-1", Kind: store.PrincipalUser, Name: "u", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	newManager := func() (*Manager, *fake.Backend) {
		b, err := fake.New(fake.Config{StateDir: stateDir})
		if err != nil {
			t.Fatal(err)
		}
		if err := backend.CheckCapabilities(b); err != nil {
			t.Fatal(err)
		}
		return New(Config{}, st, b, coldTemplate{}, slog.New(slog.NewTextHandler(io.Discard, nil))), b
	}
	m, fb := newManager()
	sb, err := m.Create(ctx, CreateRequest{Owner: "p-1", Template: template.BaseName, Isolation: fake.ID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	t.Cleanup(func() { m.Kill(ctx, id, "test over") })

	agentBefore := coldSh(t, m, id, "echo kept > file.txt; echo $PPID")
	bg, err := strconv.Atoi(coldSh(t, m, id, "nohup sleep 600 >/dev/null 2>&1 & echo $!"))
	if err != nil || !alivePid(bg) {
		t.Fatalf("background process %d not running: %v", bg, err)
	}

	paused, err := m.PauseCold(ctx, id)
	if err != nil {
		t.Fatalf("PauseCold: %v", err)
	}
	if State(paused.State) != StatePaused || !paused.Lifecycle.Cold {
		t.Fatalf("after PauseCold: state %s cold %v; want paused, cold", paused.State, paused.Lifecycle.Cold)
	}
	if alivePid(bg) {
		t.Errorf("background process %d survived a cold pause", bg)
	}
	if bs, err := fb.Status(ctx, m.mustHandle(t, id)); err != nil || bs != backend.StateStopped {
		t.Errorf("backend status after a cold pause = %s, %v; want stopped", bs, err)
	}
	if _, err := m.Agent(ctx, id); err == nil {
		t.Error("a cold-paused sandbox handed out an agent client")
	}
	if _, err := m.PauseCold(ctx, id); err == nil {
		t.Error("a second cold pause succeeded")
	}
	// The end of its processes must not end the sandbox (the watcher).
	time.Sleep(300 * time.Millisecond)
	if got, _ := m.Get(ctx, id); State(got.State) != StatePaused {
		t.Fatalf("cold-paused sandbox is %s (%s); want paused", got.State, got.EndReason)
	}

	resumed, err := m.Resume(ctx, id)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if State(resumed.State) != StateRunning || resumed.Lifecycle.Cold || !resumed.ExpiresAt.After(time.Now()) {
		t.Fatalf("after Resume: state %s cold %v expires %v", resumed.State, resumed.Lifecycle.Cold, resumed.ExpiresAt)
	}
	if got := coldSh(t, m, id, "cat file.txt"); got != "kept" {
		t.Errorf("file after a cold resume = %q, want kept", got)
	}
	if agentAfter := coldSh(t, m, id, "echo $PPID"); agentAfter == agentBefore {
		t.Errorf("agent pid %s unchanged by a cold resume: not a new boot", agentAfter)
	}
	if got := coldSh(t, m, id, "grep -c boot starts.log"); got != "2" {
		t.Errorf("start command ran %s times, want 2 (create and cold resume)", got)
	}
	if alivePid(bg) {
		t.Errorf("background process %d is back", bg)
	}

	// A daemon restart while cold-paused: a new manager and backend on the
	// same store and state directory.
	if _, err := m.PauseCold(ctx, id); err != nil {
		t.Fatalf("second PauseCold: %v", err)
	}
	m.Shutdown()
	m2, fb2 := newManager()
	if attached, lost, err := m2.Recover(ctx); err != nil || attached != 1 || lost != 0 {
		t.Fatalf("Recover: attached %d lost %d, %v; want 1, 0", attached, lost, err)
	}
	if got, _ := m2.Get(ctx, id); State(got.State) != StatePaused || !got.Lifecycle.Cold {
		t.Fatalf("after a restart: %s cold %v; want paused, cold", got.State, got.Lifecycle.Cold)
	}
	if _, err := m2.Resume(ctx, id); err != nil {
		t.Fatalf("Resume after a restart: %v", err)
	}
	if got := coldSh(t, m2, id, "cat file.txt; grep -c boot starts.log"); got != "kept\n3" {
		t.Errorf("after a restart and resume: %q, want kept and 3 boots", got)
	}
	if err := m2.Kill(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	if left := fb2.Leftovers(id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// mustHandle returns the backend handle the manager holds for id.
func (m *Manager) mustHandle(t *testing.T, id string) backend.Handle {
	t.Helper()
	l, ok := m.lookup(id)
	if !ok {
		t.Fatalf("no live handle for %s", id)
	}
	return l.h
}

// TestColdPauseUnsupported checks that a backend without Restarter
// refuses a cold pause with ErrUnsupported and the sandbox keeps running.
func TestColdPauseUnsupported(t *testing.T) {
	m, _, st := newStubManager(t, Config{}, backend.Capabilities{Pause: true})
	ctx := context.Background()
	sb := store.Sandbox{ID: "sb-cold", Owner: "p-1", State: string(StateRunning), Backend: "stub", CreatedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour)}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	m.adopt(sb.ID, m.b, backend.Handle{Version: backend.HandleVersion, Backend: "stub", ID: sb.ID})
	if _, err := m.PauseCold(ctx, sb.ID); !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("PauseCold on a backend without Restarter: %v; want ErrUnsupported", err)
	}
	if got, _ := m.Get(ctx, sb.ID); State(got.State) != StateRunning || got.Lifecycle.Cold {
		t.Fatalf("after a refused cold pause: %s cold %v; want running", got.State, got.Lifecycle.Cold)
	}
}
