// Package sudo is Warden's sudo: E2B's templates let the default user run
// `sudo cmd` as root, and Warden's sandboxes forbid setuid (no_new_privs,
// no capabilities). Instead, the agent (PID 1, the sandbox's root) listens
// on a unix socket inside the sandbox, SocketPath, that speaks one request
// only: "run this argv as that user with these standard streams". The
// `sudo` program is the warden-agent binary itself under that name
// (bind-mounted read-only at ShimPath by the backend when the sandbox has
// sudo): it parses sudo's common flags, passes its fds 0, 1 and 2 over
// SCM_RIGHTS, forwards the signals it gets and exits with the command's
// status.
//
// The socket reaches nothing else of the agent: it is not the agent's
// HTTP service, and the only thing a request can do is start one process.
// Root inside a sandbox has no capabilities and is an unprivileged uid on
// the host (docs/security.md), so this gives the sandbox's own processes
// nothing its API callers could not already ask for (user "root").
package sudo

import (
	"errors"
	"fmt"
	"strings"
)

// SocketPath is where the agent listens for sudo requests, inside the
// sandbox; ShimPath is where the sandbox's backend bind-mounts the sudo
// program (the agent binary, read-only) when the sandbox has sudo.
const (
	SocketPath = "/run/warden/sudo.sock"
	ShimPath   = "/usr/local/bin/sudo"
)

// Options are the parsed command line of the sudo program.
type Options struct {
	User        string   // -u; "root" when not given
	PreserveEnv bool     // -E
	Login       bool     // -i
	Shell       bool     // -s
	NonInteract bool     // -n (Warden's sudo never prompts)
	Help        bool     // -h
	Version     bool     // -V
	Command     []string // what to run; may be empty with -i or -s
}

// usageText is printed by -h and with usage errors.
const usageText = `usage: sudo [-EHins] [-u user] [--] command [arg ...]
       sudo -i [-u user] [command [arg ...]]
       sudo -s [-u user] [command [arg ...]]
Warden's sudo asks the sandbox's agent to run the command as the user (root
by default); it never asks for a password.
  -u, --user=USER        run as USER (a name or #uid) instead of root
  -E, --preserve-env     keep the caller's environment
  -i, --login            run the user's login shell (in their home)
  -s, --shell            run a shell ($SHELL or the user's)
  -n, --non-interactive  never prompt (Warden's sudo never does)
  -H, --set-home         set HOME to the user's home (always done)
  -h, --help             show this help
  -V, --version          show the version
`

// ErrUsage is wrapped by Parse's errors: the command line is wrong.
var ErrUsage = errors.New("usage")

// Parse parses sudo's command line (without the program name).
func Parse(args []string) (Options, error) {
	o := Options{User: "root"}
	i := 0
	needUser := func(v string, rest []string) (string, int, error) {
		if v != "" {
			return v, 0, nil
		}
		if len(rest) == 0 || rest[0] == "" {
			return "", 0, fmt.Errorf("%w: option requires an argument -- 'u'", ErrUsage)
		}
		return rest[0], 1, nil
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			switch name {
			case "user":
				if !hasVal {
					val = ""
				}
				u, used, err := needUser(val, args[i+1:])
				if err != nil {
					return o, err
				}
				o.User, i = u, i+used
				continue
			case "preserve-env":
				if hasVal {
					return o, fmt.Errorf("%w: --preserve-env=LIST is not supported by Warden's sudo; use -E", ErrUsage)
				}
				o.PreserveEnv = true
			case "login":
				o.Login = true
			case "shell":
				o.Shell = true
			case "non-interactive":
				o.NonInteract = true
			case "set-home":
			case "help":
				o.Help = true
			case "version":
				o.Version = true
			default:
				return o, fmt.Errorf("%w: unrecognized option '--%s' (Warden's sudo supports -u, -E, -i, -s, -n, -H)", ErrUsage, name)
			}
			if hasVal && name != "user" {
				return o, fmt.Errorf("%w: option '--%s' doesn't allow an argument", ErrUsage, name)
			}
			continue
		}
		flags := a[1:]
	short:
		for j := 0; j < len(flags); j++ {
			switch c := flags[j]; c {
			case 'u':
				u, used, err := needUser(flags[j+1:], args[i+1:])
				if err != nil {
					return o, err
				}
				o.User, i = u, i+used
				break short
			case 'E':
				o.PreserveEnv = true
			case 'i':
				o.Login = true
			case 's':
				o.Shell = true
			case 'n':
				o.NonInteract = true
			case 'H':
			case 'h':
				o.Help = true
			case 'V':
				o.Version = true
			default:
				return o, fmt.Errorf("%w: invalid option -- '%c' (Warden's sudo supports -u, -E, -i, -s, -n, -H)", ErrUsage, c)
			}
		}
	}
	o.Command = args[i:]
	if o.Help || o.Version {
		return o, nil
	}
	if o.Login && o.Shell {
		return o, fmt.Errorf("%w: you may not specify both the -i and -s options", ErrUsage)
	}
	if len(o.Command) == 0 && !o.Login && !o.Shell {
		return o, fmt.Errorf("%w: a command is required", ErrUsage)
	}
	if strings.HasPrefix(o.User, "#") {
		o.User = o.User[1:] // #uid: the agent takes numeric ids as they are
	}
	if o.User == "" {
		return o, fmt.Errorf("%w: empty user", ErrUsage)
	}
	return o, nil
}

// shellJoin joins a command for `shell -c` as sudo does for -i and -s:
// every character but letters, digits, '_', '-' and '$' escaped with a
// backslash, words separated by spaces.
func shellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '$') {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
