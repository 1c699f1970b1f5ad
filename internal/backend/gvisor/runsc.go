package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// runsc runs the runsc command line for one sandbox.
type runsc struct {
	path  string
	flags []string // global flags, the same for every command of the sandbox
}

// runTimeout bounds a runsc command that should return at once.
const runTimeout = 30 * time.Second

// run runs a runsc subcommand and returns its stdout; its error carries
// what runsc said.
func (r runsc) run(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	cmd := r.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String() + " " + out.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return out.Bytes(), fmt.Errorf("runsc %s: %w: %s", args[0], err, msg)
	}
	return out.Bytes(), nil
}

// command is the command line of a runsc subcommand.
func (r runsc) command(ctx context.Context, args ...string) *exec.Cmd {
	// runsc logs to stdout by default, which carries the JSON of state and
	// ps; what goes wrong is on stderr.
	return exec.CommandContext(ctx, r.path, append(append(append([]string{}, r.flags...), "--log=/dev/null"), args...)...)
}

// containerState is the part of `runsc state` the backend reads.
type containerState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"` // creating, created, running, paused, stopped
}

func (r runsc) state(ctx context.Context, id string) (containerState, error) {
	var st containerState
	out, err := r.run(ctx, "state", id)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("runsc state: %w", err)
	}
	return st, nil
}

// procs lists the pids of the sandbox's processes (in its own pid namespace).
func (r runsc) procs(ctx context.Context, id string) ([]int, error) {
	out, err := r.run(ctx, "ps", "--format=json", id)
	if err != nil {
		return nil, err
	}
	var ps []struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(out, &ps); err != nil {
		return nil, fmt.Errorf("runsc ps: %w", err)
	}
	pids := make([]int, 0, len(ps))
	for _, p := range ps {
		pids = append(pids, p.PID)
	}
	return pids, nil
}
