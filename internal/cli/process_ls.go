package cli

import (
	"context"
	"io"
	"strconv"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func processLsCmd() *command {
	c := &command{
		name:    "ls",
		aliases: []string{"list", "ps"},
		args:    "ID",
		short:   "List a sandbox's processes",
		long:    "List the processes started through the API in the sandbox, running or exited.",
		json:    true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		ps, err := cl.Processes(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			if ps == nil {
				ps = []warden.ProcessInfo{}
			}
			return printJSON(r.env.Stdout, ps)
		}
		return writeProcessTable(r.env.Stdout, ps)
	}
	return c
}

// writeProcessTable writes processes as a table.
func writeProcessTable(w io.Writer, ps []warden.ProcessInfo) error {
	t := newTable(w, "PID", "TAG", "USER", "STATE", "COMMAND")
	for _, p := range ps {
		state := "running"
		if p.Exited {
			state = "exited"
		}
		t.row(strconv.Itoa(p.PID), orDash(p.Tag), orDash(p.User), state, truncate(strings.Join(p.Cmd, " "), 60))
	}
	return t.flush()
}
