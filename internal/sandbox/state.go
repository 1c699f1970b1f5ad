package sandbox

import (
	"cmp"
	"slices"
	"strings"

	"github.com/warden-sandbox/warden/internal/store"
)

// State is a sandbox's lifecycle state.
type State string

// States of the lifecycle.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
	StateFailed   State = "failed"
	StateLost     State = "lost"

	// stateNew is the state of a sandbox that has no record yet: its edges
	// are the states a record may be created in.
	stateNew State = ""
)

// states lists every state, stateNew first.
var states = []State{stateNew, StateStarting, StateRunning, StatePaused, StateStopping, StateStopped, StateFailed, StateLost}

// transitions is the lifecycle: the legal edges out of each state. Every
// change of a record's State goes through transition (setState), and the
// package comment's diagram shows these edges (TestStateDiagram checks it).
var transitions = map[State][]State{
	stateNew:      {StateStarting, StateRunning},                         // booted, or claimed from the warm pool
	StateStarting: {StateRunning, StateStopping, StateFailed, StateLost}, // booted; killed while booting; boot failed; restart
	StateRunning:  {StatePaused, StateStopping, StateLost},               // pause; kill, timeout, exit; restart
	StatePaused:   {StateRunning, StateStopping, StateLost},              // resume; kill; restart
	StateStopping: {StateStopped, StateLost},                             // deleted; restart
	StateStopped:  nil,
	StateFailed:   nil,
	StateLost:     nil,
}

// Terminal reports whether s is an end state.
func (s State) Terminal() bool { return s == StateStopped || s == StateFailed || s == StateLost }

// transition checks that a sandbox may go from state from to state to.
// An illegal edge is a *StateError (a conflict) naming what to needs.
func transition(from, to State) error {
	if slices.Contains(transitions[from], to) {
		return nil
	}
	var want []string
	for _, s := range states {
		if slices.Contains(transitions[s], to) {
			want = append(want, cmp.Or(string(s), "new"))
		}
	}
	if from == stateNew {
		from = "new"
	}
	if len(want) == 0 {
		return &StateError{State: from, Want: "a state from which it can become " + string(to)}
	}
	return &StateError{State: from, Want: strings.Join(want, " or ") + " to become " + string(to)}
}

// setState moves record s to state to if the lifecycle allows it; the
// error for an illegal edge names the sandbox.
func setState(s *store.Sandbox, to State) error {
	if err := transition(State(s.State), to); err != nil {
		if se, ok := err.(*StateError); ok {
			se.ID = s.ID
		}
		return err
	}
	s.State = string(to)
	return nil
}
