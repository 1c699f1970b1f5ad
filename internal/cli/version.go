package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Version is the CLI's version, set at link time with
// -ldflags "-X github.com/warden-sandbox/warden/internal/cli.Version=v1.2.3". When empty,
// the module version from the build information is used.
var Version string

// version returns the CLI's version.
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// versionInfo is what `warden version --json` prints.
type versionInfo struct {
	Client    string   `json:"client"`
	GoVersion string   `json:"go_version"`
	Server    string   `json:"server,omitempty"`
	Backends  []string `json:"backends,omitempty"` // the daemon's isolation backends ready now
	URL       string   `json:"url"`
	Error     string   `json:"error,omitempty"`
}

func versionCmd() *command {
	c := &command{
		name:  "version",
		short: "Print the client and daemon versions",
		long: "Print the version of this client and of the daemon it talks to. An unreachable daemon\n" +
			"is reported but is not an error.",
		json: true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		info := versionInfo{Client: version(), GoVersion: runtime.Version()}
		cl, err := r.client()
		if err != nil {
			return err
		}
		info.URL = r.baseURL
		hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if h, err := cl.Health(hctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			msg, _, _ := r.describe(err)
			info.Error = oneLine(msg)
		} else {
			info.Server = h.Version
			info.Backends = h.Backends
		}
		if r.g.json {
			return printJSON(r.env.Stdout, info)
		}
		fmt.Fprintf(r.env.Stdout, "client: %s (%s)\n", info.Client, info.GoVersion)
		if info.Error != "" {
			fmt.Fprintf(r.env.Stdout, "server: unreachable: %s\n", info.Error)
		} else {
			fmt.Fprintf(r.env.Stdout, "server: %s (%s)\n", orDash(info.Server), info.URL)
			if len(info.Backends) > 0 {
				fmt.Fprintf(r.env.Stdout, "backends ready: %s\n", strings.Join(info.Backends, ", "))
			}
		}
		return nil
	}
	return c
}
