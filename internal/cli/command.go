package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one node of the command tree: a group (with subs) or a leaf (with run).
type command struct {
	name    string
	aliases []string
	// args is the synopsis of the positional arguments, such as "ID -- CMD [ARG...]".
	args string
	// short is the one-line summary shown in the parent's command list.
	short string
	// long is the help text shown by --help, without the usage and flag lists.
	long string
	// examples are shown under "Examples:", one command line each.
	examples []string
	// json adds the global --json flag: the command prints objects.
	json bool
	// flags registers the command's own flags.
	flags func(fs *flagSet)
	// parseArgs replaces the default parsing (flags anywhere before "--") for commands
	// such as exec whose trailing arguments belong to someone else.
	parseArgs func(fs *flagSet, args []string) ([]string, error)
	subs      []*command
	run       func(ctx context.Context, r *runner, args []string) error

	parent *command
	fs     *flagSet
}

// path returns the command's full name, such as "warden sandbox create".
func (c *command) path() string {
	if c.parent == nil {
		return c.name
	}
	return c.parent.path() + " " + c.name
}

// find returns the subcommand called name (or one of its aliases).
func (c *command) find(name string) *command {
	for _, s := range c.subs {
		if s.name == name {
			return s
		}
		for _, a := range s.aliases {
			if a == name {
				return s
			}
		}
	}
	return nil
}

// build creates the flag sets of c and its subcommands, registering the global flags on
// every one of them. All flag sets are built before any is parsed, because registering a
// flag resets the variable it is bound to.
func (c *command) build(g *globalFlags) {
	c.fs = newFlagSet(c.path())
	if c.flags != nil {
		c.flags(c.fs)
	}
	if c.json {
		c.fs.Bool(&g.json, "json", "print JSON instead of text")
	}
	c.fs.global(&g.url, "url", "URL", "daemon address: http(s)://HOST:PORT, HOST:PORT or unix:///PATH (default\n$WARDEN_URL, else unix://"+defaultSocketPath+" if usable,\nelse "+defaultURL+")")
	c.fs.global(&g.apiKey, "api-key", "KEY", "API key (default $WARDEN_API_KEY, else the content of\n"+defaultAdminKeyFile+" when readable)")
	for _, s := range c.subs {
		s.parent = c
		s.build(g)
	}
}

// flagSpec describes one flag for the help text.
type flagSpec struct {
	name    string
	aliases []string
	arg     string // value placeholder; empty for booleans
	usage   string
}

// flagSet wraps a flag.FlagSet and remembers what --help shows: declaration order,
// aliases and value placeholders.
type flagSet struct {
	fs      *flag.FlagSet
	own     []*flagSpec
	globals []*flagSpec
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs}
}

func (f *flagSet) add(v flag.Value, name, arg, usage string, aliases []string) {
	f.fs.Var(v, name, usage)
	for _, a := range aliases {
		f.fs.Var(v, a, usage)
	}
	f.own = append(f.own, &flagSpec{name: name, aliases: aliases, arg: arg, usage: usage})
}

// String registers a string flag; *p's current value is the default.
func (f *flagSet) String(p *string, name, arg, usage string, aliases ...string) {
	f.add((*stringValue)(p), name, arg, usage, aliases)
}

// Int registers an int flag; *p's current value is the default.
func (f *flagSet) Int(p *int, name, arg, usage string, aliases ...string) {
	f.add((*intValue)(p), name, arg, usage, aliases)
}

// Bool registers a boolean flag; *p's current value is the default.
// Int64 registers an int64 flag; *p's current value is the default.
func (f *flagSet) Int64(p *int64, name, arg, usage string, aliases ...string) {
	f.add((*int64Value)(p), name, arg, usage, aliases)
}

func (f *flagSet) Bool(p *bool, name, usage string, aliases ...string) {
	f.add((*boolValue)(p), name, "", usage, aliases)
}

// Var registers a flag of any type.
func (f *flagSet) Var(v flag.Value, name, arg, usage string, aliases ...string) {
	f.add(v, name, arg, usage, aliases)
}

// global registers one of the flags every command accepts.
func (f *flagSet) global(p *string, name, arg, usage string) {
	f.fs.Var((*stringValue)(p), name, usage)
	f.globals = append(f.globals, &flagSpec{name: name, arg: arg, usage: usage})
}

// parse parses flags anywhere among args until "--", and returns the positional
// arguments in order (those after "--" included, the "--" itself dropped).
func (f *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			return nil, err
		}
		rest := f.fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseLeading parses flags up to the first positional argument and returns the rest
// untouched (group commands: the rest starts with the subcommand's name).
func (f *flagSet) parseLeading(args []string) ([]string, error) {
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	return f.fs.Args(), nil
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := parseInt(s)
	if err != nil {
		return err
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return fmt.Sprint(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "yes", "t":
		*v = true
	case "false", "0", "no", "f":
		*v = false
	default:
		return fmt.Errorf("want true or false, not %q", s)
	}
	return nil
}
func (v *boolValue) String() string   { return fmt.Sprint(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

// flagError rewrites the flag package's parse errors as usage errors in the CLI's words.
func flagError(c *command, err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		msg = "unknown flag " + dashed(name)
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-")
		msg = "flag " + dashed(name) + " needs a value"
	case strings.HasPrefix(msg, "invalid value ") || strings.HasPrefix(msg, "invalid boolean value "):
		// invalid value "x" for flag -cpu: ..., invalid boolean value "x" for -json: ...
		for _, sep := range []string{" for flag -", " for -"} {
			if i := strings.Index(msg, sep); i >= 0 {
				name, why, _ := strings.Cut(msg[i+len(sep):], ": ")
				val := strings.TrimPrefix(strings.TrimPrefix(msg[:i], "invalid boolean value "), "invalid value ")
				msg = fmt.Sprintf("flag %s: invalid value %s: %s", dashed(name), val, why)
				break
			}
		}
	}
	return usageErr(c, "%s", msg)
}

// dashed writes a flag name as users type it: -x for one letter, --name otherwise.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// writeHelp writes c's help text to w.
func writeHelp(w io.Writer, c *command) {
	var b strings.Builder
	if c.parent == nil {
		b.WriteString(c.long)
		b.WriteString("\n\nUsage:\n  warden <command> [flags]\n")
	} else {
		b.WriteString("Usage:\n  ")
		b.WriteString(c.path())
		switch {
		case len(c.subs) > 0:
			b.WriteString(" <command>")
		case len(c.fs.own) > 0 || c.json:
			b.WriteString(" [flags]")
		}
		if c.args != "" {
			b.WriteString(" " + c.args)
		}
		b.WriteString("\n")
		if len(c.aliases) > 0 {
			b.WriteString("\nAliases: " + strings.Join(append([]string{c.name}, c.aliases...), ", ") + "\n")
		}
		b.WriteString("\n" + c.long + "\n")
	}
	if len(c.subs) > 0 {
		b.WriteString("\nCommands:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, s := range c.subs {
			fmt.Fprintf(tw, "  %s\t%s\n", s.name, s.short)
		}
		tw.Flush()
	}
	writeFlags := func(title string, specs []*flagSpec) {
		if len(specs) == 0 {
			return
		}
		b.WriteString("\n" + title + ":\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, s := range specs {
			var names []string
			for _, a := range s.aliases {
				names = append(names, dashed(a))
			}
			names = append(names, dashed(s.name))
			col := strings.Join(names, ", ")
			if s.arg != "" {
				col += " " + s.arg
			}
			lines := strings.Split(s.usage, "\n")
			fmt.Fprintf(tw, "  %s\t%s\n", col, lines[0])
			for _, l := range lines[1:] {
				fmt.Fprintf(tw, "  \t%s\n", l)
			}
		}
		tw.Flush()
	}
	writeFlags("Flags", c.fs.own)
	writeFlags("Global flags", c.fs.globals)
	if len(c.examples) > 0 {
		b.WriteString("\nExamples:\n")
		for _, e := range c.examples {
			b.WriteString("  " + e + "\n")
		}
	}
	if c.parent == nil {
		b.WriteString("\nEnvironment:\n  WARDEN_URL      daemon address (see --url)\n  WARDEN_API_KEY  API key (see --api-key)\n")
	}
	if len(c.subs) > 0 {
		fmt.Fprintf(&b, "\nRun '%s <command> --help' for more about a command.\n", c.path())
	}
	io.WriteString(w, b.String())
}

// errHelp asks Run to print the command's help on stdout and exit 0.
var errHelp = flag.ErrHelp

// isHelp reports whether err is a request for help.
func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }
