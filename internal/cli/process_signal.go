package cli

import (
	"context"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func processSignalCmd() *command {
	sig := string(warden.SIGTERM)
	c := &command{
		name:    "signal",
		aliases: []string{"kill"},
		args:    "ID PID",
		short:   "Send a signal to a process",
		long: "Send a signal to a process in the sandbox (to its whole process group). SIGNAL is a name\n" +
			"(SIGTERM, TERM) or a number (15): HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP.",
		examples: []string{
			"warden process signal sb-01hzx3k9q2 12",
			"warden process signal -s KILL sb-01hzx3k9q2 12",
		},
	}
	c.flags = func(fs *flagSet) {
		fs.String(&sig, "signal", "SIGNAL", "signal to send (default SIGTERM)", "s")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a process ID, got %d arguments", len(args))
		}
		pid, err := parsePID(args[1])
		if err != nil {
			return usageErr(c, "%v", err)
		}
		s, err := parseSignal(sig)
		if err != nil {
			return usageErr(c, "%v", err)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		return cl.Signal(ctx, args[0], pid, s)
	}
	return c
}
