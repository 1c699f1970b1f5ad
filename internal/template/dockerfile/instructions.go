package dockerfile

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// flagKind says how an instruction treats one of its --flags.
type flagKind int

const (
	flagString      flagKind = iota // --name=value
	flagUnsupported                 // a Docker flag Warden refuses
)

// flagSpecs lists the flags each instruction knows; any other is an error.
var flagSpecs = map[string]map[string]flagKind{
	"FROM": {"platform": flagString},
	"RUN":  {"mount": flagUnsupported, "network": flagUnsupported, "security": flagUnsupported},
	"COPY": {
		"chown": flagString, "chmod": flagString,
		"from": flagUnsupported, "link": flagUnsupported, "parents": flagUnsupported, "exclude": flagUnsupported,
	},
	"ADD": {
		"chown": flagString, "chmod": flagString,
		"link": flagUnsupported, "exclude": flagUnsupported, "checksum": flagUnsupported,
		"keep-git-dir": flagUnsupported, "unpack": flagUnsupported,
	},
	"HEALTHCHECK": {
		"interval": flagString, "timeout": flagString, "start-period": flagString,
		"start-interval": flagString, "retries": flagString,
	},
}

// ignored are instructions Warden accepts but drops, with the warning to give.
var ignored = map[string]string{
	"MAINTAINER": "MAINTAINER is deprecated and ignored; use LABEL",
	"STOPSIGNAL": "STOPSIGNAL is ignored; Warden stops sandboxes itself",
	"VOLUME":     "VOLUME is ignored; sandboxes have no volumes",
}

var known = map[string]bool{
	"FROM": true, "RUN": true, "COPY": true, "ADD": true, "ENV": true, "ARG": true,
	"WORKDIR": true, "USER": true, "EXPOSE": true, "ENTRYPOINT": true, "CMD": true,
	"LABEL": true, "HEALTHCHECK": true, "SHELL": true,
	"MAINTAINER": true, "STOPSIGNAL": true, "VOLUME": true, "ONBUILD": true,
}

// instr is the instruction being parsed.
type instr struct {
	p    *parser
	line int
	cmd  string
	// flags are the --name=value flags, by name.
	flags map[string]string
	rest  string // the arguments after the flags
}

func (in *instr) errorf(format string, args ...any) error {
	return errorf(in.line, format, args...)
}

// cook processes one word with the file's escape character, naming the
// instruction in errors.
func (in *instr) cook(s string) (cooked, error) {
	c, err := cook(s, in.p.escape)
	if err != nil {
		return cooked{}, in.errorf("%s: %v in %q", in.cmd, err, s)
	}
	return c, nil
}

// parseFlags checks raw flag words against the instruction's spec.
func (in *instr) parseFlags(words []string) error {
	spec := flagSpecs[in.cmd]
	in.flags = map[string]string{}
	for _, w := range words {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		kind, ok := spec[name]
		switch {
		case !ok:
			return in.errorf("unknown flag --%s for %s", name, in.cmd)
		case kind == flagUnsupported:
			why := ""
			switch name {
			case "from":
				why = " (multi-stage builds are not supported)"
			case "mount", "network", "security":
				why = " (builds have no mounts and no network)"
			}
			return in.errorf("%s --%s is not supported%s", in.cmd, name, why)
		case !hasValue:
			return in.errorf("missing a value on flag --%s for %s", name, in.cmd)
		}
		if _, dup := in.flags[name]; dup {
			return in.errorf("duplicate flag --%s for %s", name, in.cmd)
		}
		in.flags[name] = value
	}
	return nil
}

// instruction parses one logical line.
func (p *parser) instruction(l logicalLine) error {
	keyword, args := cutKeyword(l.text)
	cmd := strings.ToUpper(keyword)
	if !known[cmd] {
		return errorf(l.start, "unknown instruction %q", cmd)
	}
	if cmd == "ONBUILD" {
		return errorf(l.start, "ONBUILD is not supported")
	}
	if !p.sawFrom && cmd != "FROM" && cmd != "ARG" {
		return errorf(l.start, "%s before FROM: only ARG may come before FROM", cmd)
	}
	in := &instr{p: p, line: l.start, cmd: cmd}
	flagWords, rest := extractFlags(args)
	in.rest = strings.TrimSpace(rest)
	if err := in.parseFlags(flagWords); err != nil {
		return err
	}
	if msg, ok := ignored[cmd]; ok {
		if in.rest == "" {
			return in.errorf("%s requires an argument", cmd)
		}
		p.warnf(l.start, "%s", msg)
		return nil
	}
	if in.rest == "" && !(cmd == "HEALTHCHECK" && len(flagWords) > 0) {
		return in.errorf("%s requires an argument", cmd)
	}

	base := Instruction{Line: l.start, EndLine: l.end, Cmd: cmd, Original: l.text}
	out := base
	var err error
	switch cmd {
	case "FROM":
		if p.sawFrom {
			return in.errorf("multi-stage builds are not supported (second FROM)")
		}
		p.sawFrom = true
		out.From, err = in.from()
	case "RUN":
		var c Command
		c, err = in.command(true)
		out.Run = &Run{Command: c}
	case "CMD", "ENTRYPOINT":
		var c Command
		c, err = in.command(false)
		if cmd == "CMD" {
			out.CmdCommand = &c
		} else {
			out.Entrypoint = &c
		}
	case "SHELL":
		out.Shell, err = in.shell()
	case "COPY", "ADD":
		out.Copy, err = in.copy()
	case "ENV":
		out.Env, err = in.keyValues()
	case "LABEL":
		out.Label, err = in.keyValues()
	case "ARG":
		var list []Arg
		if list, err = in.args(); err != nil {
			return err
		}
		if !p.sawFrom {
			p.file.Args = append(p.file.Args, list...)
			return nil
		}
		// ARG a=1 b=2 declares each in turn, like one ARG per line.
		for i := range list {
			a := base
			a.Arg = &list[i]
			p.file.Instructions = append(p.file.Instructions, a)
		}
		return nil
	case "WORKDIR":
		out.Workdir, err = in.workdir()
	case "USER":
		out.User, err = in.user()
	case "EXPOSE":
		out.Expose, err = in.expose()
	case "HEALTHCHECK":
		out.Healthcheck, err = in.healthcheck()
	}
	if err != nil {
		return err
	}
	p.file.Instructions = append(p.file.Instructions, out)
	return nil
}

// reStageName is Docker's rule for a build stage name.
var reStageName = regexp.MustCompile(`^[a-z][a-z0-9-_.]*$`)

func (in *instr) from() (*From, error) {
	words := splitBlanks(in.rest)
	if len(words) != 1 && (len(words) != 3 || !strings.EqualFold(words[1], "AS")) {
		return nil, in.errorf("FROM requires either one or three arguments: FROM image [AS name]")
	}
	img, err := in.cook(words[0])
	if err != nil {
		return nil, err
	}
	if !img.dynamic {
		if img.literal == "" {
			return nil, in.errorf("FROM requires an image")
		}
		if !validReference(img.literal) {
			return nil, in.errorf("invalid image reference %q", img.literal)
		}
	}
	f := &From{Image: img.text}
	if pl, ok := in.flags["platform"]; ok {
		c, err := in.cook(pl)
		if err != nil {
			return nil, err
		}
		f.Platform = c.text
	}
	if len(words) == 3 {
		f.As = strings.ToLower(words[2])
		if !reStageName.MatchString(f.As) {
			return nil, in.errorf("invalid name for build stage %q: it must start with a letter and hold only letters, digits, '-', '_' and '.'", words[2])
		}
	}
	return f, nil
}

// command parses the shell or exec form of RUN, CMD, ENTRYPOINT. isRun
// refuses heredocs and an empty exec form.
func (in *instr) command(isRun bool) (Command, error) {
	args, isJSON, err := parseJSON(in.rest)
	if err != nil {
		return Command{}, in.errorf("%s: %v", in.cmd, err)
	}
	if isJSON {
		if isRun && len(args) == 0 {
			return Command{}, in.errorf("%s requires at least one argument", in.cmd)
		}
		return Command{Args: args}, nil
	}
	if isRun && hasHeredoc(in.rest, in.p.escape) {
		return Command{}, in.errorf("heredocs are not supported")
	}
	return Command{Shell: true, Args: []string{in.rest}}, nil
}

func (in *instr) shell() ([]string, error) {
	args, isJSON, err := parseJSON(in.rest)
	switch {
	case err != nil:
		return nil, in.errorf("SHELL: %v", err)
	case !isJSON:
		return nil, in.errorf(`SHELL requires the arguments to be in JSON form, as in SHELL ["/bin/bash", "-c"]`)
	case len(args) == 0:
		return nil, in.errorf("SHELL requires at least one argument")
	}
	return args, nil
}

// reScheme matches a URL scheme, as in "https://" or "git://".
var reScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://`)

func isRemote(src string) bool {
	return reScheme.MatchString(src) || strings.HasPrefix(src, "git@")
}

func (in *instr) copy() (*Copy, error) {
	words, isJSON, err := parseJSON(in.rest)
	if err != nil {
		return nil, in.errorf("%s: %v", in.cmd, err)
	}
	if !isJSON {
		if hasHeredoc(in.rest, in.p.escape) {
			return nil, in.errorf("heredocs are not supported")
		}
		words = splitBlanks(in.rest)
	}
	if len(words) < 2 {
		return nil, in.errorf("%s requires at least one source and a destination", in.cmd)
	}
	c := &Copy{Add: in.cmd == "ADD"}
	for i, w := range words {
		cw, err := cook(w, in.p.escape)
		if err != nil {
			if !isJSON && (errors.Is(err, errSingleQuote) || errors.Is(err, errDoubleQuote)) {
				return nil, in.errorf("%s: unmatched quote in %q; a path with blanks needs the JSON form, as in %s [\"my file\", \"/dest/\"]", in.cmd, w, in.cmd)
			}
			return nil, in.errorf("%s: %v in %q", in.cmd, err, w)
		}
		if !cw.dynamic && cw.literal == "" {
			return nil, in.errorf("%s: empty path", in.cmd)
		}
		if i == len(words)-1 {
			c.Dest = cw.text
			break
		}
		if isRemote(cw.text) {
			if c.Add {
				return nil, in.errorf("ADD from a URL is not supported; use RUN with curl")
			}
			return nil, in.errorf("COPY source can't be a URL: %q", w)
		}
		c.Sources = append(c.Sources, cw.text)
	}
	if v, ok := in.flags["chown"]; ok {
		cw, err := in.cook(v)
		if err != nil {
			return nil, err
		}
		if !cw.dynamic && !validUser(cw.literal) {
			return nil, in.errorf("%s: invalid --chown %q: use user, uid, user:group or uid:gid", in.cmd, cw.literal)
		}
		c.Chown = cw.text
	}
	if v, ok := in.flags["chmod"]; ok {
		cw, err := in.cook(v)
		if err != nil {
			return nil, err
		}
		if !cw.dynamic {
			if m, err := strconv.ParseUint(cw.literal, 8, 32); err != nil || m > 0o7777 {
				return nil, in.errorf("%s: invalid --chmod %q: use an octal mode such as 0755", in.cmd, cw.literal)
			}
		}
		c.Chmod = cw.text
	}
	return c, nil
}

// keyValues parses ENV and LABEL: "k=v k2=v2 ..." or the legacy "k v...".
func (in *instr) keyValues() ([]KeyValue, error) {
	words := parseWords(in.rest, in.p.escape)
	if len(words) == 0 {
		return nil, in.errorf("%s requires an argument", in.cmd)
	}
	type pair struct{ k, v string }
	var pairs []pair
	if !strings.Contains(words[0], "=") {
		// Legacy form: the first word is the key, the rest of the line
		// (blanks and all) the value.
		i := strings.IndexFunc(in.rest, func(r rune) bool { return r < 0x80 && isBlank(byte(r)) })
		if i < 0 {
			return nil, in.errorf("%s %s: missing value; use %s %s=value", in.cmd, in.rest, in.cmd, in.rest)
		}
		pairs = append(pairs, pair{in.rest[:i], strings.TrimSpace(in.rest[i:])})
		in.p.warnf(in.line, `legacy "%s key value" form; use "%s key=value"`, in.cmd, in.cmd)
	} else {
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				return nil, in.errorf("%s: can't find = in %q; use name=value", in.cmd, w)
			}
			pairs = append(pairs, pair{k, v})
		}
	}
	out := make([]KeyValue, 0, len(pairs))
	for _, kv := range pairs {
		k, err := in.cook(kv.k)
		if err != nil {
			return nil, err
		}
		if !k.dynamic && k.literal == "" {
			return nil, in.errorf("%s names can not be blank", in.cmd)
		}
		v, err := in.cook(kv.v)
		if err != nil {
			return nil, err
		}
		out = append(out, KeyValue{Key: k.text, Value: v.text})
	}
	return out, nil
}

func (in *instr) args() ([]Arg, error) {
	words := parseWords(in.rest, in.p.escape)
	if len(words) == 0 {
		return nil, in.errorf("ARG requires an argument")
	}
	out := make([]Arg, 0, len(words))
	for _, w := range words {
		k, v, hasValue := strings.Cut(w, "=")
		name, err := in.cook(k)
		if err != nil {
			return nil, err
		}
		if !name.dynamic && name.literal == "" {
			return nil, in.errorf("ARG names can not be blank")
		}
		a := Arg{Name: name.text}
		if hasValue {
			val, err := in.cook(v)
			if err != nil {
				return nil, err
			}
			a.Default = &val.text
		}
		out = append(out, a)
	}
	return out, nil
}

func (in *instr) workdir() (string, error) {
	c, err := in.cook(in.rest)
	if err != nil {
		return "", err
	}
	if !c.dynamic && c.literal == "" {
		return "", in.errorf("WORKDIR requires a non-empty path")
	}
	return c.text, nil
}

func (in *instr) user() (string, error) {
	c, err := in.cook(in.rest)
	if err != nil {
		return "", err
	}
	if !c.dynamic && !validUser(c.literal) {
		return "", in.errorf("invalid USER %q: use user, uid, user:group or uid:gid", c.literal)
	}
	return c.text, nil
}

// validUser accepts "name", "uid", "name:group" and "uid:gid".
func validUser(s string) bool {
	user, group, hasGroup := strings.Cut(s, ":")
	if user == "" || (hasGroup && (group == "" || strings.Contains(group, ":"))) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

func (in *instr) expose() ([]string, error) {
	var out []string
	for _, w := range splitBlanks(in.rest) {
		c, err := in.cook(w)
		if err != nil {
			return nil, err
		}
		if c.dynamic {
			out = append(out, c.text)
			continue
		}
		port, err := NormalizePort(c.literal)
		if err != nil {
			return nil, in.errorf("EXPOSE: %v", err)
		}
		out = append(out, port)
	}
	return out, nil
}

// NormalizePort checks an EXPOSE port spec, "port[-port][/protocol]" with
// ports 1-65535 and protocol tcp (the default), udp or sctp, and returns it
// with the protocol spelled out in lower case: "80" becomes "80/tcp". The
// builder uses it on EXPOSE values that held variables, after Expand.
func NormalizePort(spec string) (string, error) {
	ports, proto, hasProto := strings.Cut(spec, "/")
	proto = strings.ToLower(proto)
	switch {
	case !hasProto:
		proto = "tcp"
	case proto != "tcp" && proto != "udp" && proto != "sctp":
		return "", fmt.Errorf("invalid protocol in port %q: use tcp, udp or sctp", spec)
	}
	lo, hi, isRange := strings.Cut(ports, "-")
	first, err := parsePort(lo)
	if err != nil {
		return "", fmt.Errorf("invalid port %q", spec)
	}
	if !isRange {
		return strconv.Itoa(first) + "/" + proto, nil
	}
	last, err := parsePort(hi)
	if err != nil || last < first {
		return "", fmt.Errorf("invalid port range %q", spec)
	}
	return strconv.Itoa(first) + "-" + strconv.Itoa(last) + "/" + proto, nil
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, strconv.ErrRange
	}
	return n, nil
}

func (in *instr) healthcheck() (*Healthcheck, error) {
	typ, rest := cutKeyword(in.rest)
	switch strings.ToUpper(typ) {
	case "NONE":
		if rest != "" || len(in.flags) > 0 {
			return nil, in.errorf("HEALTHCHECK NONE takes no arguments")
		}
		return &Healthcheck{None: true}, nil
	case "CMD":
	case "":
		return nil, in.errorf("HEALTHCHECK requires NONE or CMD")
	default:
		return nil, in.errorf("unknown type %q in HEALTHCHECK (try CMD)", typ)
	}
	h := &Healthcheck{}
	args, isJSON, err := parseJSON(rest)
	switch {
	case err != nil:
		return nil, in.errorf("HEALTHCHECK: %v", err)
	case isJSON && len(args) == 0, !isJSON && rest == "":
		return nil, in.errorf("missing command after HEALTHCHECK CMD")
	case isJSON:
		h.Command = Command{Args: args}
	default:
		h.Command = Command{Shell: true, Args: []string{rest}}
	}
	for _, d := range []struct {
		flag string
		dst  *time.Duration
	}{
		{"interval", &h.Interval},
		{"timeout", &h.Timeout},
		{"start-period", &h.StartPeriod},
		{"start-interval", &h.StartInterval},
	} {
		v, ok := in.flags[d.flag]
		if !ok || v == "" {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil {
			return nil, in.errorf("HEALTHCHECK: invalid --%s %q: use a duration such as 30s", d.flag, v)
		}
		if dur != 0 && dur < time.Millisecond {
			return nil, in.errorf("HEALTHCHECK: --%s cannot be less than 1ms", d.flag)
		}
		*d.dst = dur
	}
	if v, ok := in.flags["retries"]; ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return nil, in.errorf("HEALTHCHECK: invalid --retries %q: use a number of at least 0", v)
		}
		h.Retries = int(n)
	}
	return h, nil
}
