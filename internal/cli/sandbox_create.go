package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func sandboxCreateCmd() *command {
	var (
		req     warden.CreateSandboxRequest
		timeout durationFlag
		env     kvFlag
		meta    kvFlag
		netMode string
		allow   string
		cpu     cpuFlag
		mem     sizeFlag
		disk    sizeFlag
		vols    volumeFlag
		idle    durationFlag
		life    durationFlag
		keep    durationFlag
	)
	c := &command{
		name:  "create",
		short: "Create and start a sandbox",
		long: "Create and start a sandbox owned by the caller, and print its ID (the whole sandbox\n" +
			"with --json). Flags left out take the daemon's defaults.",
		examples: []string{
			"warden sandbox create",
			"id=$(warden sandbox create --cpu 2 --memory 1g --disk 10G --timeout 1h --meta job=42)",
			"warden sandbox create --net allowlist --allow pypi.org,files.pythonhosted.org,*.github.com",
			"warden sandbox create --isolation gvisor --auto-pause",
			"warden sandbox create --name web && warden exec web -- uname -a",
			"warden sandbox create --volume data:/data --volume models:/models:ro",
			"warden sandbox create --idle-timeout 30m --max-lifetime 720h --retention 168h",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		env.allowBare = true
		fs.String(&req.Name, "name", "NAME", "name the sandbox, usable instead of its ID while it is live:\n"+
			"lowercase letters, digits and '-', not starting with sb-;\nunique among your live sandboxes")
		fs.String(&req.Template, "template", "T", "template to start from (default: the daemon's, base)")
		fs.String(&req.Snapshot, "snapshot", "NAME", "start from your snapshot NAME instead of a template")
		fs.String(&req.Isolation, "isolation", "BACKEND", "isolation backend: native or gvisor (default: the daemon's)")
		fs.Var(&cpu, "cpu", "CPUS", "CPU limit in CPUs, such as 2 or 0.5 (or millicores: 500m)")
		fs.Var(&mem, "memory", "SIZE", "memory limit, such as 512m or 1g (a bare number is MiB)")
		fs.Var(&disk, "disk", "SIZE", "disk limit, such as 1g or 10G (a bare number is MiB)")
		fs.Var(&timeout, "timeout", "DURATION", "kill the sandbox after this long, such as 300, 90s, 1h\n(default: the daemon's, 5m)")
		fs.Var(&env, "env", "K=V", "environment variable for every process in the sandbox; repeatable;\na bare K copies the local value")
		fs.Var(&meta, "meta", "K=V", "metadata pair to label the sandbox with; repeatable")
		fs.String(&req.User, "user", "U", "user that processes run as (default: the template's)")
		fs.String(&req.Workdir, "workdir", "D", "working directory of processes (default: the template's)")
		fs.Bool(&req.AutoPause, "auto-pause", "pause at the timeout instead of being killed")
		fs.Bool(&req.AutoResume, "auto-resume", "resume when a call reaches the sandbox while paused")
		fs.String(&netMode, "net", "MODE", "network: none (loopback only, the default), allowlist or open")
		fs.Var(&idle, "idle-timeout", "DURATION", "pause after this long without activity (a call wakes it); without\n--timeout, no countdown")
		fs.String(&req.OnIdle, "on-idle", "ACTION", "at the idle timeout: pause (the default) or kill")
		fs.Var(&life, "max-lifetime", "DURATION", "kill the sandbox this long after its creation (default: unlimited)")
		fs.Var(&keep, "retention", "DURATION", "delete the sandbox once paused this long (default: the daemon's)")
		fs.Var(&vols, "volume", "NAME:/PATH[:ro]", "mount your volume NAME at PATH (read-only with :ro); repeatable")
		fs.String(&allow, "allow", "LIST", "with --net allowlist: hosts (*.example.com), CIDRs, each with :PORT\nto pick ports (default 80 and 443), comma-separated")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if err := env.resolve(r.env.Getenv); err != nil {
			return usageErr(c, "--env %v", err)
		}
		req.Env, req.Metadata, req.TimeoutSeconds = env.m, meta.m, timeout.secs
		req.CPUMillis, req.MemoryMB, req.DiskMB = cpu.millis, mem.mib, disk.mib
		req.Volumes = vols.v
		req.IdleTimeoutSeconds, req.MaxLifetimeSeconds, req.PausedRetentionSeconds = idle.secs, life.secs, keep.secs
		if netMode != "" || allow != "" {
			p, err := parseNetwork(netMode, allow)
			if err != nil {
				return usageErr(c, "%v", err)
			}
			req.Network = &p
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		sb, err := cl.CreateSandbox(ctx, req)
		if err != nil {
			return nameFlagWords(flagWords(err), "--name")
		}
		if r.g.json {
			return printJSON(r.env.Stdout, sb)
		}
		_, err = fmt.Fprintln(r.env.Stdout, sb.ID)
		return err
	}
	return c
}
