package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func snapshotCmd() *command {
	return &command{
		name:    "snapshot",
		aliases: []string{"snapshots", "snap"},
		short:   "Capture sandboxes' files as snapshots; start sandboxes from them",
		long: "Manage filesystem snapshots: a named capture of a running or paused sandbox's files,\n" +
			"taken without stopping it. Start sandboxes from one (warden sandbox create --snapshot\n" +
			"NAME) or promote it to a template. See docs/persistence.md.",
		subs: []*command{snapshotCreateCmd(), snapshotLsCmd(), snapshotRmCmd(), snapshotPromoteCmd()},
	}
}

func snapshotCreateCmd() *command {
	var memory bool
	c := &command{
		name:     "create",
		args:     "SANDBOX [NAME]",
		short:    "Snapshot a sandbox's files",
		long:     "Capture the files of SANDBOX (running or paused; it keeps running) as snapshot NAME\n(default: the snapshot's id).",
		examples: []string{"warden snapshot create sb-abc good-state", "warden snapshot create --memory sb-abc warm"},
		json:     true,
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&memory, "memory", "also keep the running sandbox's memory (gvisor): sandboxes from it run on")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			return usageErr(c, "want the sandbox and, optionally, the snapshot's name")
		}
		name := ""
		if len(args) == 2 {
			name = args[1]
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		create := cl.CreateSnapshot
		if memory {
			create = cl.CreateSnapshotWithMemory
		}
		s, err := create(ctx, args[0], name)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, s)
		}
		_, err = fmt.Fprintln(r.env.Stdout, s.Name)
		return err
	}
	return c
}

func snapshotLsCmd() *command {
	var sandbox string
	c := &command{name: "ls", aliases: []string{"list"}, short: "List your snapshots", long: "List your snapshots, oldest first.", json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&sandbox, "sandbox", "ID", "only the snapshots of this sandbox (its id)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListSnapshots(ctx, sandbox)
		if err != nil {
			return err
		}
		if r.g.json {
			if list == nil {
				list = []warden.Snapshot{}
			}
			return printJSON(r.env.Stdout, list)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSANDBOX\tSIZE\tCREATED\tID")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%dMiB\t%s\t%s\n", s.Name, s.SandboxID, s.SizeBytes>>20, s.CreatedAt.Format("2006-01-02 15:04"), s.ID)
		}
		return tw.Flush()
	}
	return c
}

func snapshotRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"delete"}, args: "NAME...", short: "Delete snapshots",
		long: "Delete each snapshot NAME. A snapshot live sandboxes run from is refused; a template\npromoted from it stays."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one snapshot name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range args {
			if err := cl.DeleteSnapshot(ctx, n); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(r.env.Stdout, n)
		}
		return errors.Join(errs...)
	}
	return c
}

func snapshotPromoteCmd() *command {
	c := &command{
		name:     "promote",
		args:     "NAME TEMPLATE",
		short:    "Make a template of a snapshot",
		long:     "Point the template TEMPLATE (name[:tag]) at snapshot NAME's files; start sandboxes\nfrom it with --template. The template stays when the snapshot is deleted.",
		examples: []string{"warden snapshot promote good-state myapp:v1"},
		json:     true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want the snapshot's name and the template's")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		t, err := cl.PromoteSnapshot(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, t)
		}
		_, err = fmt.Fprintln(r.env.Stdout, t.Name)
		return err
	}
	return c
}
