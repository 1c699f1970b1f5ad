// Package dockerfile parses the Dockerfiles that Warden sandbox templates are
// built from into typed instructions.
//
// The parser follows Docker's (BuildKit's) documented behaviour for the
// subset Warden builds: a single stage, no build-time network, no mounts. It
// reads the file the way Docker does: keywords are case-insensitive, lines
// whose first non-blank character is '#' are comments (also inside a
// continuation), a trailing escape character continues the instruction on
// the next line, and the "# escape=" parser directive may switch the escape
// character from '\' to '`'. Everything Warden cannot honour is refused with
// an error that names the line ("Dockerfile:12: ..."), except MAINTAINER,
// STOPSIGNAL and VOLUME and the "# syntax=" directive, which are dropped with
// a warning in File.Warnings.
//
// # Values and Expand
//
// Docker applies environment replacement to FROM, ENV, LABEL, ARG, COPY,
// ADD, WORKDIR, USER and EXPOSE (and to the --platform, --chown and --chmod
// flags), and removes quotes and escapes from those values in the same pass.
// Parse does the quote and escape removal, so `ENV K="v 2"` gives the value
// "v 2", but leaves variable references for the builder, which knows the
// values of ARG and ENV at each step. Those fields, keys and names included,
// are therefore in Expand's input syntax: a '$' that Docker keeps literally
// (written `\$` or inside single quotes) becomes `\$` wherever Expand would
// otherwise read a substitution, a backslash before '$', '\' or '}' is
// doubled, and a '}' inside a ${...} default is escaped. Pass every such
// field through Expand before use, even when no variables are set:
// Expand(v, nil) yields the literal text. Expand of a parsed field gives
// exactly what Docker's own word processing would.
//
// RUN, CMD, ENTRYPOINT, SHELL and HEALTHCHECK commands are not subject to
// replacement: their shell form is the command text as written (continuations
// joined), for the shell to interpret.
package dockerfile

import (
	"fmt"
	"io"
	"time"
)

// MaxSize is the largest Dockerfile Parse accepts, in bytes.
const MaxSize = 1 << 20

// File is a parsed single-stage Dockerfile.
type File struct {
	// Args are the ARGs declared before FROM. They may be used in FROM
	// and are redeclared (without a value) inside the stage to be used
	// there, as in Docker.
	Args []Arg
	// Instructions are the instructions of the stage, in order, starting
	// with FROM. Instructions Parse ignores (see Warnings) are left out.
	Instructions []Instruction
	// Warnings name what was accepted but ignored or is deprecated, each
	// prefixed with "Dockerfile:N: ".
	Warnings []string
}

// Instruction is one Dockerfile instruction. Exactly one of the fields after
// Original is set, chosen by Cmd: From for FROM, Run for RUN, Copy for COPY
// and ADD, Env for ENV, Arg for ARG, Workdir for WORKDIR, User for USER,
// Expose for EXPOSE, Entrypoint for ENTRYPOINT, CmdCommand for CMD, Label
// for LABEL, Healthcheck for HEALTHCHECK and Shell for SHELL.
type Instruction struct {
	Line    int    // 1-based line where the instruction starts
	EndLine int    // 1-based line where it ends (after continuations)
	Cmd     string // upper-case keyword, e.g. "RUN"
	// Original is the instruction as written, continuation lines joined
	// (escape characters and comment lines removed) and surrounding blanks
	// trimmed; for logs and cache keys.
	Original string

	From        *From
	Run         *Run
	Copy        *Copy
	Env         []KeyValue
	Arg         *Arg
	Workdir     string
	User        string
	Expose      []string // "8080/tcp", "53/udp", "8000-8010/tcp"; see NormalizePort
	Entrypoint  *Command
	CmdCommand  *Command
	Label       []KeyValue
	Healthcheck *Healthcheck
	Shell       []string
}

// From is a FROM instruction. Image and Platform are in Expand's syntax.
type From struct {
	Image    string // image[:tag][@digest], or "scratch"
	Platform string // the --platform flag, "" if absent
	As       string // stage name, lower-cased; "" if absent
}

// Run is a RUN instruction.
type Run struct {
	Command Command
}

// Command is a command in shell or exec form.
type Command struct {
	// Shell is true for the shell form: Args holds the single command
	// string, to run with the SHELL (default ["/bin/sh", "-c"]). For the
	// exec (JSON) form Args is the array, which may be empty for CMD and
	// ENTRYPOINT ("CMD []").
	Shell bool
	Args  []string
}

// Copy is a COPY or ADD instruction. Sources, Dest, Chown and Chmod are in
// Expand's syntax.
type Copy struct {
	Add     bool // ADD: local tar archives are extracted
	Sources []string
	Dest    string
	Chown   string // --chown=user[:group], "" if absent
	Chmod   string // --chmod=octal, "" if absent
}

// KeyValue is one ENV or LABEL pair; both halves are in Expand's syntax.
type KeyValue struct {
	Key, Value string
}

// Arg is an ARG declaration. Name and *Default are in Expand's syntax.
type Arg struct {
	Name    string
	Default *string // nil for "ARG NAME"
}

// Healthcheck is a HEALTHCHECK instruction. Zero durations and retries mean
// "not set" (the runtime default applies).
type Healthcheck struct {
	None          bool    // HEALTHCHECK NONE: disable any inherited check
	Command       Command // HEALTHCHECK CMD ...
	Interval      time.Duration
	Timeout       time.Duration
	StartPeriod   time.Duration
	StartInterval time.Duration
	Retries       int
}

// Error is a parse error. Line is 0 when the error concerns the whole file.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("Dockerfile:%d: %s", e.Line, e.Msg)
	}
	return "Dockerfile: " + e.Msg
}

func errorf(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Parse reads a Dockerfile. Errors are *Error and name the line, as in
// "Dockerfile:12: unknown instruction \"FOOO\"".
func Parse(r io.Reader) (*File, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	if len(data) > MaxSize {
		return nil, &Error{Msg: "file is larger than 1 MiB"}
	}
	p := &parser{escape: '\\', file: &File{}}
	lines, err := p.logicalLines(string(data))
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		if err := p.instruction(l); err != nil {
			return nil, err
		}
	}
	if !p.sawFrom {
		return nil, &Error{Msg: "no FROM instruction"}
	}
	return p.file, nil
}
