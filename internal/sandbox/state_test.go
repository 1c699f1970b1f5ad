package sandbox

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// legal is the lifecycle written out edge by edge, independently of the
// table, so that changing the table takes changing this too.
var legal = map[[2]State]bool{
	{stateNew, StateStarting}:      true,
	{stateNew, StateRunning}:       true,
	{StateStarting, StateRunning}:  true,
	{StateStarting, StateStopping}: true,
	{StateStarting, StateFailed}:   true,
	{StateStarting, StateLost}:     true,
	{StateRunning, StatePaused}:    true,
	{StateRunning, StateStopping}:  true,
	{StateRunning, StateLost}:      true,
	{StatePaused, StateRunning}:    true,
	{StatePaused, StateStopping}:   true,
	{StatePaused, StateLost}:       true,
	{StateStopping, StateStopped}:  true,
	{StateStopping, StateLost}:     true,
}

func TestTransitionTable(t *testing.T) {
	for from := range transitions {
		if !slices.Contains(states, from) {
			t.Errorf("transitions has state %q that states does not list", from)
		}
		for _, to := range transitions[from] {
			if !slices.Contains(states, to) {
				t.Errorf("transitions has edge %q -> %q to a state that states does not list", from, to)
			}
		}
	}
	n := 0
	for _, from := range states {
		for _, to := range states {
			err := transition(from, to)
			if legal[[2]State{from, to}] {
				n++
				if err != nil {
					t.Errorf("transition(%q, %q) = %v; want it allowed", from, to, err)
				}
				continue
			}
			var se *StateError
			if !errors.As(err, &se) {
				t.Errorf("transition(%q, %q) = %v; want a *StateError", from, to, err)
				continue
			}
			if se.Want == "" || (from != stateNew && se.State != from) {
				t.Errorf("transition(%q, %q): error %+v does not say what was needed", from, to, se)
			}
		}
	}
	if n != len(legal) {
		t.Errorf("checked %d legal edges, the test lists %d (a state missing from states?)", n, len(legal))
	}
}

func TestTerminalStates(t *testing.T) {
	for _, s := range states {
		if s.Terminal() != (len(transitions[s]) == 0) {
			t.Errorf("state %q: Terminal() = %v but it has %d outgoing edges", s, s.Terminal(), len(transitions[s]))
		}
		if s.Terminal() {
			for _, to := range states {
				if transition(s, to) == nil {
					t.Errorf("terminal state %q may become %q", s, to)
				}
			}
		}
	}
	// Every state reaches a terminal state: nothing can be stuck forever
	// by the table.
	for _, s := range states {
		seen := map[State]bool{}
		var reach func(State) bool
		reach = func(s State) bool {
			if s.Terminal() {
				return true
			}
			if seen[s] {
				return false
			}
			seen[s] = true
			return slices.ContainsFunc(transitions[s], reach)
		}
		if !reach(s) {
			t.Errorf("state %q cannot reach a terminal state", s)
		}
	}
	// A daemon restart may lose any live sandbox.
	for _, s := range []State{StateStarting, StateRunning, StatePaused, StateStopping} {
		if transition(s, StateLost) != nil {
			t.Errorf("a %s sandbox cannot be recorded lost after a restart", s)
		}
	}
}

func TestSetState(t *testing.T) {
	sb := store.Sandbox{ID: "sb-x", State: string(StateStopped)}
	err := setState(&sb, StateRunning)
	var se *StateError
	if !errors.As(err, &se) || se.ID != "sb-x" || se.State != StateStopped {
		t.Fatalf("setState(stopped -> running) = %v; want a StateError naming sb-x and stopped", err)
	}
	if sb.State != string(StateStopped) {
		t.Fatalf("a refused setState changed the record to %q", sb.State)
	}
	if !strings.Contains(err.Error(), "sb-x") || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("error %q names neither the sandbox nor its state", err)
	}
	sb.State = string(StateRunning)
	if err := setState(&sb, StatePaused); err != nil || sb.State != string(StatePaused) {
		t.Fatalf("setState(running -> paused) = %v, state %q", err, sb.State)
	}
}

// TestStateDiagram checks that the package comment lists the table's edges.
func TestStateDiagram(t *testing.T) {
	fset := token.NewFileSet()
	var doc string
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if af.Doc != nil {
			doc += af.Doc.Text()
		}
	}
	line := regexp.MustCompile(`(?m)^\t(\S+)\s+──> (.+)$`)
	got := map[[2]State]bool{}
	for _, m := range line.FindAllStringSubmatch(doc, -1) {
		from := State(m[1])
		if from == "new" {
			from = stateNew
		}
		for _, to := range strings.Split(m[2], ",") {
			got[[2]State{from, State(strings.TrimSpace(to))}] = true
		}
	}
	if len(got) == 0 {
		t.Fatal("the package comment lists no state edges")
	}
	for from, tos := range transitions {
		for _, to := range tos {
			if !got[[2]State{from, to}] {
				t.Errorf("the package comment lacks the edge %q -> %q", from, to)
			}
			delete(got, [2]State{from, to})
		}
	}
	for e := range got {
		t.Errorf("the package comment shows the edge %q -> %q that the table lacks", e[0], e[1])
	}
}

// TestStateWritesUseTransition checks that no code of the package sets a
// record's State but setState: every change is checked against the table.
func TestStateWritesUseTransition(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && fd.Name.Name == "setState" && f == "state.go" {
				return false
			}
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, l := range n.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "State" {
						t.Errorf("%s: a record's State is set directly; use setState", fset.Position(n.Pos()))
					}
				}
			case *ast.CompositeLit:
				if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sandbox" {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "State" {
								t.Errorf("%s: a store.Sandbox is made with a State; use setState", fset.Position(kv.Pos()))
							}
						}
					}
				}
			}
			return true
		})
	}
}
