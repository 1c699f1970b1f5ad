package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func fsStatCmd() *command {
	c := &command{
		name:  "stat",
		args:  "ID PATH",
		short: "Describe a file, directory or symlink",
		long:  "Describe a path in the sandbox without following a final symlink.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		e, err := cl.Stat(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		return printEntry(r, e)
	}
	return c
}

// printEntry prints one entry as JSON or as "Name: value" lines.
func printEntry(r *runner, e warden.Entry) error {
	if r.g.json {
		return printJSON(r.env.Stdout, e)
	}
	return writeEntry(r.env.Stdout, e, r.env.Now())
}

func writeEntry(w io.Writer, e warden.Entry, now time.Time) error {
	f := newFields(w)
	f.add("Path", e.Path)
	f.add("Type", e.Type)
	if e.Type == warden.EntrySymlink {
		f.add("Target", orDash(e.SymlinkTarget))
	}
	f.add("Size", fmt.Sprintf("%d (%s)", e.Size, bytesIEC(e.Size)))
	f.add("Mode", e.Mode+" ("+modeString(e)+")")
	f.add("Owner", orDash(e.Owner))
	f.add("Group", orDash(e.Group))
	f.add("Modified", timestamp(e.ModifiedAt, now))
	return f.flush()
}
