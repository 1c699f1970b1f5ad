package cli

import (
	"context"
)

func processAttachCmd() *command {
	var (
		replay = true
		stdin  bool
	)
	c := &command{
		name:  "attach",
		args:  "ID PID",
		short: "Reattach to a process's output",
		long: "Stream the output of a process started earlier (for example by a 'warden exec' that was\n" +
			"interrupted) until it exits, and exit with its exit status. The output the daemon kept\n" +
			"while nobody listened comes first, unless --replay=false.",
		examples: []string{"warden process attach sb-01hzx3k9q2 12"},
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&replay, "replay", "send the output kept while nobody listened first (default true)")
		fs.Bool(&stdin, "interactive", "pass stdin to the process (it must have been started with -i)", "i")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a process ID, got %d arguments", len(args))
		}
		pid, err := parsePID(args[1])
		if err != nil {
			return usageErr(c, "%v", err)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		s, err := cl.StreamProcess(ctx, args[0], pid, replay)
		if err != nil {
			return err
		}
		defer s.Close()
		return followProcess(ctx, r, cl, s, args[0], stdin)
	}
	return c
}
