package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"time"
)

const (
	defaultURL          = "http://127.0.0.1:7070"
	defaultSocketPath   = "/run/warden/wardend.sock"
	defaultAdminKeyFile = "/var/lib/warden/admin.key"
)

// Exit statuses of the warden command. A command run by `warden exec` or
// `warden process attach` passes its own status through instead.
const (
	ExitOK          = 0
	ExitError       = 1   // the command failed
	ExitUsage       = 2   // bad flags or arguments
	ExitInterrupted = 130 // the context was cancelled (Ctrl-C)
)

// Env is what a command reads from outside its arguments. Zero fields take the real
// process's: os.Stdin and friends, os.Getenv, time.Now, the default paths, and the
// terminal attached to Stdin.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// Getenv reads an environment variable (WARDEN_URL, WARDEN_API_KEY, COLUMNS, LINES).
	Getenv func(string) string
	// Now is the clock that ages and expiry times in tables are relative to.
	Now func() time.Time

	// SocketPath is the daemon's unix socket, used when it exists and neither --url nor
	// WARDEN_URL is set; default /run/warden/wardend.sock.
	SocketPath string
	// AdminKeyFile is read for an API key when neither --api-key nor WARDEN_API_KEY is
	// set; default /var/lib/warden/admin.key.
	AdminKeyFile string

	// HTTPClient, when set, is the SDK's HTTP client.
	HTTPClient *http.Client
	// Terminal is the terminal `warden exec -t` puts in raw mode and sizes the remote
	// terminal from. Nil means the terminal on os.Stdin when Stdin is os.Stdin and a
	// terminal, and none otherwise.
	Terminal Terminal
}

func (e *Env) fill() {
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.SocketPath == "" {
		e.SocketPath = defaultSocketPath
	}
	if e.AdminKeyFile == "" {
		e.AdminKeyFile = defaultAdminKeyFile
	}
	if e.Terminal == nil {
		e.Terminal = stdinTerminal(e.Stdin, e.Stdout)
	}
}

// Main runs the warden command with args (without the program name) and the given
// standard streams, and returns the exit status. Cancelling ctx (as cmd/warden does on
// SIGINT and SIGTERM) stops the command.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Run(ctx, args, Env{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// globalFlags are the flags every command accepts.
type globalFlags struct {
	url    string
	apiKey string
	json   bool
}

// runner carries what a running command needs: its environment, the global flags and the
// command itself.
type runner struct {
	env Env
	g   globalFlags
	cmd *command

	// Set by client(): where the URL and key came from, for hints.
	baseURL   string
	keySource string
}

// Run runs the warden command with args (without the program name) in env and returns
// the exit status. It never calls os.Exit, so tests and other programs can run commands
// in-process.
func Run(ctx context.Context, args []string, env Env) int {
	env.fill()
	r := &runner{env: env}
	root := newRoot()
	root.build(&r.g)

	c := root
	for {
		r.cmd = c
		if c.run != nil && len(c.subs) == 0 {
			break
		}
		rest, err := c.fs.parseLeading(args)
		if err != nil {
			if isHelp(err) {
				writeHelp(env.Stdout, c)
				return ExitOK
			}
			return r.report(flagError(c, err))
		}
		if len(rest) == 0 {
			writeHelp(env.Stderr, c)
			return ExitUsage
		}
		sub := c.find(rest[0])
		if sub == nil {
			return r.report(&usageError{cmd: c, msg: "unknown command " + quote(rest[0]) + " for " + quote(c.path())})
		}
		c, args = sub, rest[1:]
	}

	parse := c.fs.parse
	if c.parseArgs != nil {
		parse = func(a []string) ([]string, error) { return c.parseArgs(c.fs, a) }
	}
	pos, err := parse(args)
	if err != nil {
		if isHelp(err) {
			writeHelp(env.Stdout, c)
			return ExitOK
		}
		var ue *usageError
		if !isUsage(err, &ue) {
			err = flagError(c, err)
		}
		return r.report(err)
	}
	return r.report(c.run(ctx, r, pos))
}

// newRoot returns the command tree.
func newRoot() *command {
	return &command{
		name: "warden",
		long: "warden is the command-line client of the Warden sandbox daemon (wardend): it creates\n" +
			"sandboxes, runs commands in them, copies files in and out, and manages API keys,\n" +
			"principals, policies, approvals and the audit log.",
		subs: []*command{
			sandboxCmd(),
			templateCmd(),
			secretCmd(),
			volumeCmd(),
			snapshotCmd(),
			gitCmd(),
			execCmd(),
			runCmd(),
			contextsCmd(),
			processCmd(),
			logsCmd(),
			cpCmd(),
			fsCmd(),
			keysCmd(),
			principalsCmd(),
			policyCmd(),
			approvalsCmd(),
			guardCmd(),
			middlewareCmd(),
			mcpCmd(),
			agentCmd(),
			whoamiCmd(),
			auditCmd(),
			usageCmd(),
			llmCmd(),
			monitorCmd(),
			memoryCmd(),
			webhookCmd(),
			versionCmd(),
			completionCmd(),
			helpCmd(),
		},
	}
}
