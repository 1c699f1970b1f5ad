package govern

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
)

// fakeAudit records what an AuditLog appends.
type fakeAudit struct {
	events []audit.Event
	ctxErr []error // ctx.Err() at each Append
	err    error
}

func (f *fakeAudit) Append(ctx context.Context, e audit.Event) (audit.Event, error) {
	f.ctxErr = append(f.ctxErr, ctx.Err())
	if f.err != nil {
		return audit.Event{}, f.err
	}
	f.events = append(f.events, e)
	return e, nil
}

func (f *fakeAudit) Verify(context.Context) (audit.Report, error) {
	return audit.Report{OK: true, Checked: len(f.events)}, nil
}

func (f *fakeAudit) LastAudit(context.Context) (store.AuditEvent, error) {
	if len(f.events) == 0 {
		return store.AuditEvent{}, store.ErrNotFound
	}
	return f.events[len(f.events)-1], nil
}

func (f *fakeAudit) ListAudit(context.Context, store.AuditFilter) ([]store.AuditEvent, error) {
	return slices.Clone(f.events), nil
}

func newTestAuditLog(t *testing.T) (*AuditLog, *fakeAudit) {
	t.Helper()
	f := &fakeAudit{}
	l, err := NewAuditLog(f, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, f
}

// TestAuditLogWrite: the audit log writes the door's event as described,
// with the decisive action's record under AuditKey and the others' under
// GovernMoreKey, leaves the door's detail alone and writes after the
// request's context ended.
func TestAuditLogWrite(t *testing.T) {
	l, f := newTestAuditLog(t)
	first := execAction("agent-1", "ls", "/")
	second := execAction("agent-1", "cat", "/etc/hosts")
	deny := Decision{Outcome: Deny, RuleID: "r1", PolicyID: "p1", PolicyVersion: 3, Message: "no"}
	detail := map[string]any{"status": 403}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Write(ctx, AuditEvent{
		RequestID: "req-1", Principal: "agent-1", Name: "process.exec", Target: "sb-1", Outcome: AuditDenied,
		Detail: detail, Governed: []Decided{{Action: first, Decision: deny}, {Action: second, Decision: Decision{Outcome: Allow}}},
	}); err != nil {
		t.Fatal(err)
	}
	if len(detail) != 1 {
		t.Errorf("Write changed the door's detail: %v", detail)
	}
	if len(f.events) != 1 {
		t.Fatalf("%d events written, want 1", len(f.events))
	}
	if f.ctxErr[0] != nil {
		t.Errorf("appended with a cancelled context (%v): an event of a call whose client left would be lost", f.ctxErr[0])
	}
	ev := f.events[0]
	if ev.RequestID != "req-1" || ev.PrincipalID != "agent-1" || ev.Action != "process.exec" || ev.Target != "sb-1" || ev.Outcome != "denied" {
		t.Errorf("event = %+v", ev)
	}
	var got struct {
		Status int           `json:"status"`
		Govern AuditRecord   `json:"govern"`
		More   []AuditRecord `json:"govern_more"`
	}
	if err := json.Unmarshal(ev.Detail, &got); err != nil {
		t.Fatalf("detail %s: %v", ev.Detail, err)
	}
	if got.Status != 403 || got.Govern.Action == nil || got.Govern.Action.Exec.Cmd != "ls" ||
		got.Govern.Decision.RuleID != "r1" || got.Govern.Decision.PolicyVersion != 3 {
		t.Errorf("detail = %s", ev.Detail)
	}
	if len(got.More) != 1 || got.More[0].Action.Exec.Cmd != "cat" {
		t.Errorf("govern_more = %+v, want the second action", got.More)
	}
	// The record is govern.Record's: exactly what a dry run replays.
	want, _ := json.Marshal(Record(first, deny))
	var raw map[string]json.RawMessage
	json.Unmarshal(ev.Detail, &raw)
	if string(raw[AuditKey]) != string(want) {
		t.Errorf("recorded %s, want Record's %s", raw[AuditKey], want)
	}
	if a, _, ok := ActionFromEvent(ev); !ok || a.Exec == nil || a.Exec.Cmd != "ls" {
		t.Errorf("ActionFromEvent of the written event = %+v, %v", a, ok)
	}
}

// TestAuditLogWritePlain: an event with no decided action is written as
// the door described it (no govern key; no detail at all when empty).
func TestAuditLogWritePlain(t *testing.T) {
	l, f := newTestAuditLog(t)
	l.Write(context.Background(), AuditEvent{Principal: "system", Name: "sandbox.end", Target: "sb-1", Outcome: AuditSuccess,
		Detail: map[string]any{"state": "stopped", "reason": "timeout"}})
	l.Write(context.Background(), AuditEvent{Principal: "p", Name: "audit.list", Outcome: AuditSuccess})
	if len(f.events) != 2 {
		t.Fatalf("%d events, want 2", len(f.events))
	}
	if got := string(f.events[0].Detail); got != `{"reason":"timeout","state":"stopped"}` {
		t.Errorf("detail = %s", got)
	}
	if f.events[1].Detail != nil {
		t.Errorf("empty detail written as %s, want none", f.events[1].Detail)
	}
	if rep, err := l.Verify(context.Background()); err != nil || !rep.OK || rep.Checked != 2 {
		t.Errorf("Verify = %+v, %v", rep, err)
	}
	if last, err := l.Last(context.Background()); err != nil || last.Action != "audit.list" {
		t.Errorf("Last = %+v, %v", last, err)
	}
	if evs, err := l.List(context.Background(), store.AuditFilter{}); err != nil || len(evs) != 2 {
		t.Errorf("List = %d events, %v", len(evs), err)
	}
}

func TestAuditLogWriteError(t *testing.T) {
	l, f := newTestAuditLog(t)
	f.err = errors.New("disk full")
	if err := l.Write(context.Background(), AuditEvent{Name: "x", Outcome: AuditSuccess}); err == nil {
		t.Fatal("Write hid the append failure")
	}
	if _, err := NewAuditLog(nil, f, nil); err == nil {
		t.Fatal("NewAuditLog accepted no audit logger")
	}
}

// doors are the packages that take actions from callers: they describe
// the action and hand it to the governed path (the engine decides it, the
// AuditLog writes its audit event); none writes audit events itself.
var doors = []string{
	"github.com/warden-sandbox/warden/internal/api",
	"github.com/warden-sandbox/warden/internal/e2b",
	"github.com/warden-sandbox/warden/internal/mcpgw",
	"github.com/warden-sandbox/warden/internal/network",
	"github.com/warden-sandbox/warden/internal/broker",
}

// TestDoorsDoNotImportAudit checks, with go list, that no door imports
// internal/audit directly: a door that did could append audit events of
// its own, beside the path's (issue 19: the doors describe the action and
// call the path). They reach the log only through govern.AuditLog.
func TestDoorsDoNotImportAudit(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(goTool); serr != nil {
			t.Skipf("SKIPPED: no go command to list the doors' imports (%v)", err)
		}
	}
	const forbidden = "github.com/warden-sandbox/warden/internal/audit"
	args := append([]string{"list", "-f", `{{.ImportPath}}:{{join .Imports ","}}`}, doors...)
	out, err := exec.Command(goTool, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(doors, pkg) {
			continue
		}
		seen++
		if slices.Contains(strings.Split(imports, ","), forbidden) {
			t.Errorf("%s imports %s directly: a door must not write (or read) the audit log itself; "+
				"hand the event to the governed path's govern.AuditLog (Write), read through its List/Last/Verify", pkg, forbidden)
		}
	}
	if seen != len(doors) {
		t.Fatalf("go list answered for %d of %d doors:\n%s", seen, len(doors), out)
	}
}
