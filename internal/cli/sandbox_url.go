package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

func sandboxURLCmd() *command {
	var (
		ttl             durationFlag
		public, private bool
	)
	c := &command{
		name:  "url",
		args:  "ID PORT",
		short: "Print a URL that reaches a port of a sandbox",
		long: "Print a URL that reaches TCP port PORT of the sandbox, where a program of the sandbox\n" +
			"listens on 127.0.0.1 (a web app, a dev server), through the daemon's proxy: HTTP and\n" +
			"WebSocket. The URL is signed: anyone holding it can use the port, without an API key,\n" +
			"until it expires (--ttl, default 1h, at most 7 days); a browser keeps a cookie, so the\n" +
			"app's own links work. When the daemon has a preview domain the URL is by host\n" +
			"(PORT-ID.DOMAIN), else by path on the daemon's address.\n\n" +
			"With --public the port is published instead: it needs no token at all, for anyone who\n" +
			"can reach the daemon, until --private, the end of the sandbox or a daemon restart;\n" +
			"the URL printed has no token. --json prints the whole answer.",
		examples: []string{
			"warden sandbox url sb-01hzx3k9q2 8000",
			"warden sandbox url sb-01hzx3k9q2 8000 --ttl 24h",
			"warden sandbox url sb-01hzx3k9q2 3000 --public",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Var(&ttl, "ttl", "DURATION", "lifetime of the signed URL, such as 30m or 24h (default 1h)")
		fs.Bool(&public, "public", "publish the port: no token needed; print its URL")
		fs.Bool(&private, "private", "make a published port private again, then print a signed URL")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a port, got %d arguments", len(args))
		}
		port, err := strconv.Atoi(args[1])
		if err != nil || port < 1 || port > 65535 {
			return usageErr(c, "port %q is not a number from 1 to 65535", args[1])
		}
		if public && (private || ttl.raw != "") {
			return usageErr(c, "--public does not go with --private or --ttl")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if public || private {
			p, err := cl.PublishPort(ctx, args[0], port, public)
			if err != nil {
				return err
			}
			if public {
				if r.g.json {
					return printJSON(r.env.Stdout, p)
				}
				_, err = fmt.Fprintln(r.env.Stdout, first(p.HostURL, p.URL))
				return err
			}
		}
		u, err := cl.PreviewURL(ctx, args[0], port, time.Duration(ttl.secs)*time.Second)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, u)
		}
		_, err = fmt.Fprintln(r.env.Stdout, first(u.HostURL, u.URL))
		return err
	}
	return c
}

// first returns the first non-empty string.
func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
