package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func volumeCmd() *command {
	return &command{
		name:    "volume",
		aliases: []string{"volumes", "vol"},
		short:   "Manage persistent volumes that outlive sandboxes",
		long: "Manage persistent volumes: named directories with a size quota that outlive sandboxes\n" +
			"and daemon restarts. Mount one at create (warden sandbox create --volume NAME:/path[:ro]):\n" +
			"read-write by one sandbox, or read-only by many. See docs/persistence.md.",
		subs: []*command{volumeCreateCmd(), volumeLsCmd(), volumeInspectCmd(), volumeResizeCmd(), volumeRmCmd(), volumeCpCmd(), volumeSnapshotCmd(), volumeRestoreCmd()},
	}
}

func volumeCreateCmd() *command {
	var size sizeFlag
	var from string
	c := &command{
		name:  "create",
		args:  "NAME",
		short: "Create a volume",
		long: "Create the volume NAME, empty, with a quota of --size (default: 1g); or, with --from,\n" +
			"a copy of a snapshot of one of your volumes, of its size.",
		examples: []string{"warden volume create data --size 10g", "warden volume create data2 --from data/before-upgrade"},
		json:     true,
	}
	c.flags = func(fs *flagSet) {
		fs.Var(&size, "size", "SIZE", "quota, such as 512m or 10g (a bare number is MiB)")
		fs.String(&from, "from", "VOLUME/SNAPSHOT", "make it from this snapshot of one of your volumes")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the volume's name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var v warden.Volume
		if from != "" {
			vol, snap, ok := strings.Cut(from, "/")
			if !ok || vol == "" || snap == "" {
				return usageErr(c, "--from: want VOLUME/SNAPSHOT")
			}
			if size.mib != 0 {
				return usageErr(c, "give --size or --from, not both: a volume made from a snapshot has its size")
			}
			v, err = cl.CreateVolumeFromSnapshot(ctx, args[0], vol, snap)
		} else {
			v, err = cl.CreateVolume(ctx, args[0], int64(size.mib))
		}
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, v)
		}
		_, err = fmt.Fprintln(r.env.Stdout, v.Name)
		return err
	}
	return c
}

func volumeLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List your volumes", long: "List your volumes with their quotas.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListVolumes(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			if list == nil {
				list = []warden.Volume{}
			}
			return printJSON(r.env.Stdout, list)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSIZE\tCREATED\tID")
		for _, v := range list {
			fmt.Fprintf(tw, "%s\t%dMiB\t%s\t%s\n", v.Name, v.SizeBytes>>20, v.CreatedAt.Format("2006-01-02 15:04"), v.ID)
		}
		return tw.Flush()
	}
	return c
}

func volumeInspectCmd() *command {
	c := &command{name: "inspect", args: "NAME", short: "Show a volume's usage and mounts", long: "Show the volume NAME: its quota, the space in use, and the live sandboxes that mount it.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the volume's name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		v, err := cl.GetVolume(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, v)
		}
		w := r.env.Stdout
		fmt.Fprintf(w, "name:     %s\nid:       %s\nsize:     %d MiB\nused:     %d MiB\ncreated:  %s\n", v.Name, v.ID, v.SizeBytes>>20, v.UsedBytes>>20, v.CreatedAt.Format("2006-01-02 15:04:05"))
		for _, a := range v.Attachments {
			mode := "rw"
			if a.ReadOnly {
				mode = "ro"
			}
			fmt.Fprintf(w, "mounted:  %s at %s (%s)\n", a.SandboxID, a.Path, mode)
		}
		return nil
	}
	return c
}

func volumeResizeCmd() *command {
	c := &command{name: "resize", args: "NAME SIZE", short: "Grow a volume", long: "Grow the volume NAME to SIZE (such as 20g). Volumes only grow.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want the volume's name and its new size")
		}
		var size sizeFlag
		if err := size.Set(args[1]); err != nil {
			return usageErr(c, "size: %v", err)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		v, err := cl.ResizeVolume(ctx, args[0], int64(size.mib))
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, v)
		}
		_, err = fmt.Fprintf(r.env.Stdout, "%s %d MiB\n", v.Name, v.SizeBytes>>20)
		return err
	}
	return c
}

func volumeRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"delete"}, args: "NAME...", short: "Delete volumes and their data", long: "Delete each volume NAME and its data. A volume a live sandbox mounts is refused."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one volume name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range args {
			if err := cl.DeleteVolume(ctx, n); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(r.env.Stdout, n)
		}
		return errors.Join(errs...)
	}
	return c
}

// volumeRef splits "NAME:/path" (a file in a volume); ok is false for a
// local path.
func volumeRef(s string) (name, path string, ok bool) {
	name, path, ok = strings.Cut(s, ":")
	if !ok || name == "" || strings.ContainsAny(name, "/\\") || !strings.HasPrefix(path, "/") {
		return "", "", false
	}
	return name, path, true
}

func volumeCpCmd() *command {
	c := &command{
		name:  "cp",
		args:  "SRC DST",
		short: "Copy a file into or out of a volume, without a sandbox",
		long: "Copy one file between this machine and a volume. Exactly one of SRC and DST is\n" +
			"VOLUME:/path; the other is a local path, or - for stdin or stdout.",
		examples: []string{
			"warden volume cp ./data.csv data:/in/data.csv",
			"warden volume cp data:/out/result.json -",
		},
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want SRC and DST")
		}
		sn, sp, sv := volumeRef(args[0])
		dn, dp, dv := volumeRef(args[1])
		if sv == dv {
			return usageErr(c, "exactly one of SRC and DST must be VOLUME:/path")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if dv {
			var in io.Reader = r.env.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			_, err := cl.WriteVolumeFile(ctx, dn, dp, in, 0)
			return err
		}
		rc, err := cl.ReadVolumeFile(ctx, sn, sp)
		if err != nil {
			return err
		}
		defer rc.Close()
		if args[1] == "-" {
			_, err = io.Copy(r.env.Stdout, rc)
			return err
		}
		f, err := os.OpenFile(args[1], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, rc); err != nil {
			f.Close()
			os.Remove(args[1])
			return err
		}
		return f.Close()
	}
	return c
}

// volumeFlag collects --volume NAME:/path[:ro] for sandbox create.
type volumeFlag struct{ v []warden.VolumeMount }

func (f *volumeFlag) String() string { return "" }

func (f *volumeFlag) Set(s string) error {
	name, rest, ok := strings.Cut(s, ":")
	if !ok || name == "" || !strings.HasPrefix(rest, "/") {
		return fmt.Errorf("%q: want NAME:/path or NAME:/path:ro", s)
	}
	m := warden.VolumeMount{Name: name, Path: rest}
	if p, ok := strings.CutSuffix(rest, ":ro"); ok {
		m.Path, m.ReadOnly = p, true
	} else if p, ok := strings.CutSuffix(rest, ":rw"); ok {
		m.Path = p
	}
	f.v = append(f.v, m)
	return nil
}
