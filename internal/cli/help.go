package cli

import (
	"context"
	"strings"
)

func helpCmd() *command {
	c := &command{
		name:     "help",
		args:     "[COMMAND...]",
		short:    "Show help for a command",
		long:     "Show help for warden or for one of its commands, such as 'warden help sandbox create'.",
		examples: []string{"warden help exec"},
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		target := c.parent
		for i, a := range args {
			sub := target.find(a)
			if sub == nil {
				return usageErr(c, "unknown command %q for %q", strings.Join(args[:i+1], " "), target.path())
			}
			target = sub
		}
		writeHelp(r.env.Stdout, target)
		return nil
	}
	return c
}
