package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func logsCmd() *command {
	var (
		follow bool
		pid    int
	)
	c := &command{
		name:  "logs",
		args:  "ID",
		short: "Print the output of a sandbox's processes",
		long: "Print the output the sandbox keeps of its processes: the template's start command and\n" +
			"the processes started through the API ('warden process ls'; an exited one is kept for\n" +
			"30 seconds). The last 1 MiB of each process's output is kept; a note on stderr says\n" +
			"when older output was dropped. stdout and stderr go to the matching streams. With -f,\n" +
			"live output follows until the processes exit (or until interrupted). With --json,\n" +
			"each event is printed as one JSON object per line.",
		examples: []string{
			"warden logs sb-01hzx3k9q2",
			"warden logs -f --pid 12 sb-01hzx3k9q2",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&follow, "follow", "keep printing live output until the processes exit", "f")
		fs.Int(&pid, "pid", "N", "only this process (default: all)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		if pid < 0 {
			return usageErr(c, "--pid: want a positive process ID, got %d", pid)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		s, err := cl.Logs(ctx, args[0], warden.LogsOptions{PID: pid, Follow: follow})
		if err != nil {
			return err
		}
		defer s.Close()
		return printLogs(r.env.Stdout, r.env.Stderr, s, r.g.json)
	}
	return c
}

// printLogs copies a log stream's output to stdout and stderr (or its events as JSON lines
// to stdout) until the stream ends.
func printLogs(stdout, stderr io.Writer, s *warden.LogStream, asJSON bool) error {
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if asJSON {
			if err := enc.Encode(ev); err != nil {
				return err
			}
			continue
		}
		var w io.Writer
		switch ev.Stream {
		case warden.LogStdout, warden.LogPTY:
			w = stdout
		case warden.LogStderr:
			w = stderr
		case warden.LogDropped:
			fmt.Fprintf(stderr, "warden: %d earlier bytes of process %d's output were dropped\n", ev.Dropped, ev.PID)
			continue
		default:
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
}
