package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func volumeSnapshotCmd() *command {
	return &command{
		name:    "snapshot",
		aliases: []string{"snapshots", "snap"},
		short:   "Manage point-in-time copies of a volume",
		long: "Manage volume snapshots: point-in-time copies of a volume, taken while a sandbox\n" +
			"mounts it or not (a mounted volume is frozen for the copy). Restore one with\n" +
			"warden volume restore, or make a new volume of one with warden volume create --from.",
		subs: []*command{volumeSnapshotCreateCmd(), volumeSnapshotLsCmd(), volumeSnapshotRmCmd()},
	}
}

func volumeSnapshotCreateCmd() *command {
	c := &command{
		name:     "create",
		args:     "VOLUME [NAME]",
		short:    "Snapshot a volume",
		long:     "Take a point-in-time copy of VOLUME named NAME (a name is made when none is given).",
		examples: []string{"warden volume snapshot create data before-upgrade"},
		json:     true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			return usageErr(c, "want the volume's name and, optionally, the snapshot's")
		}
		name := ""
		if len(args) == 2 {
			name = args[1]
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		sn, err := cl.SnapshotVolume(ctx, args[0], name)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, sn)
		}
		_, err = fmt.Fprintln(r.env.Stdout, sn.Name)
		return err
	}
	return c
}

func volumeSnapshotLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, args: "VOLUME", short: "List a volume's snapshots",
		long: "List the snapshots of VOLUME, oldest first.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the volume's name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListVolumeSnapshots(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			if list == nil {
				list = []warden.VolumeSnapshot{}
			}
			return printJSON(r.env.Stdout, list)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSIZE\tSTORED\tCREATED\tID")
		for _, sn := range list {
			fmt.Fprintf(tw, "%s\t%dMiB\t%dMiB\t%s\t%s\n", sn.Name, sn.SizeBytes>>20, sn.StoredBytes>>20, sn.CreatedAt.Format("2006-01-02 15:04:05"), sn.ID)
		}
		return tw.Flush()
	}
	return c
}

func volumeSnapshotRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"delete"}, args: "VOLUME NAME...", short: "Delete volume snapshots",
		long: "Delete each snapshot NAME of VOLUME."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 2 {
			return usageErr(c, "want the volume's name and at least one snapshot name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range args[1:] {
			if err := cl.DeleteVolumeSnapshot(ctx, args[0], n); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(r.env.Stdout, n)
		}
		return errors.Join(errs...)
	}
	return c
}

func volumeRestoreCmd() *command {
	c := &command{
		name:  "restore",
		args:  "VOLUME SNAPSHOT",
		short: "Restore a volume from one of its snapshots",
		long: "Replace the files of VOLUME with those of its snapshot SNAPSHOT, atomically. Refused while\n" +
			"a live sandbox mounts the volume. The volume keeps its size.",
		examples: []string{"warden volume restore data before-upgrade"},
		json:     true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want the volume's name and the snapshot's")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		v, err := cl.RestoreVolume(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, v)
		}
		_, err = fmt.Fprintf(r.env.Stdout, "%s restored from %s\n", v.Name, args[1])
		return err
	}
	return c
}
