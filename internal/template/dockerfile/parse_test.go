package dockerfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return f
}

func ptr(s string) *string { return &s }

// TestInstructions parses "FROM alpine" followed by one instruction and
// checks the instruction.
func TestInstructions(t *testing.T) {
	tests := []struct {
		src  string
		want Instruction
	}{
		// RUN
		{"RUN apt-get update", Instruction{Run: &Run{Command{Shell: true, Args: []string{"apt-get update"}}}}},
		{`RUN ["echo", "a b"]`, Instruction{Run: &Run{Command{Args: []string{"echo", "a b"}}}}},
		{`run  echo "$HOME"  `, Instruction{Cmd: "RUN", Run: &Run{Command{Shell: true, Args: []string{`echo "$HOME"`}}}}},
		{`RUN [ "echo", "x" ] && true`, Instruction{Run: &Run{Command{Shell: true, Args: []string{`[ "echo", "x" ] && true`}}}}},
		{`RUN [echo]`, Instruction{Run: &Run{Command{Shell: true, Args: []string{`[echo]`}}}}},
		{`RUN cat <<< "here string"`, Instruction{Run: &Run{Command{Shell: true, Args: []string{`cat <<< "here string"`}}}}},
		{`RUN echo $((1<<4)) "<<EOF"`, Instruction{Run: &Run{Command{Shell: true, Args: []string{`echo $((1<<4)) "<<EOF"`}}}}},
		{`RUN -- --weird`, Instruction{Run: &Run{Command{Shell: true, Args: []string{`--weird`}}}}},
		// CMD and ENTRYPOINT
		{`CMD ["python", "app.py"]`, Instruction{CmdCommand: &Command{Args: []string{"python", "app.py"}}}},
		{`CMD python app.py`, Instruction{CmdCommand: &Command{Shell: true, Args: []string{"python app.py"}}}},
		{`CMD []`, Instruction{CmdCommand: &Command{Args: []string{}}}},
		{`ENTRYPOINT ["/entry.sh"]`, Instruction{Entrypoint: &Command{Args: []string{"/entry.sh"}}}},
		{`ENTRYPOINT exec top -b`, Instruction{Entrypoint: &Command{Shell: true, Args: []string{"exec top -b"}}}},
		{`ENTRYPOINT ["a",]`, Instruction{Entrypoint: &Command{Shell: true, Args: []string{`["a",]`}}}},
		// SHELL
		{`SHELL ["/bin/bash", "-o", "pipefail", "-c"]`, Instruction{Shell: []string{"/bin/bash", "-o", "pipefail", "-c"}}},
		// COPY and ADD
		{`COPY . /app`, Instruction{Copy: &Copy{Sources: []string{"."}, Dest: "/app"}}},
		{`COPY a b /dest/`, Instruction{Copy: &Copy{Sources: []string{"a", "b"}, Dest: "/dest/"}}},
		{`COPY ["a b", "c", "/dest dir/"]`, Instruction{Copy: &Copy{Sources: []string{"a b", "c"}, Dest: "/dest dir/"}}},
		{`COPY --chown=app:app --chmod=0755 run.sh /usr/local/bin/`, Instruction{Copy: &Copy{Sources: []string{"run.sh"}, Dest: "/usr/local/bin/", Chown: "app:app", Chmod: "0755"}}},
		{`COPY --chown=1000 --chmod=644 "x" $DEST`, Instruction{Copy: &Copy{Sources: []string{"x"}, Dest: "$DEST", Chown: "1000", Chmod: "644"}}},
		{`COPY --chown=${U}:${G} x /y`, Instruction{Copy: &Copy{Sources: []string{"x"}, Dest: "/y", Chown: "${U}:${G}"}}},
		{`COPY \$x /y`, Instruction{Copy: &Copy{Sources: []string{`\$x`}, Dest: "/y"}}},
		{`ADD app.tar.gz /opt/`, Instruction{Copy: &Copy{Add: true, Sources: []string{"app.tar.gz"}, Dest: "/opt/"}}},
		{`add --chown=root src /dst`, Instruction{Cmd: "ADD", Copy: &Copy{Add: true, Sources: []string{"src"}, Dest: "/dst", Chown: "root"}}},
		// ENV
		{`ENV K=V K2="v 2"`, Instruction{Env: []KeyValue{{"K", "V"}, {"K2", "v 2"}}}},
		{`ENV A=a\ b B='x "y"' C="say \"hi\"" D=`, Instruction{Env: []KeyValue{{"A", "a b"}, {"B", `x "y"`}, {"C", `say "hi"`}, {"D", ""}}}},
		{`ENV PATH=/app/bin:$PATH`, Instruction{Env: []KeyValue{{"PATH", "/app/bin:$PATH"}}}},
		{`ENV P="${PREFIX:-/usr}/lib" Q='$literal' R=\$also`, Instruction{Env: []KeyValue{{"P", "${PREFIX:-/usr}/lib"}, {"Q", `\$literal`}, {"R", `\$also`}}}},
		{`ENV W=C:\\dir X=a\tb`, Instruction{Env: []KeyValue{{"W", `C:\dir`}, {"X", "atb"}}}},
		{`ENV MY_NAME John Doe`, Instruction{Env: []KeyValue{{"MY_NAME", "John Doe"}}}},
		{`ENV MSG  "hello   world"`, Instruction{Env: []KeyValue{{"MSG", "hello   world"}}}},
		// LABEL
		{`LABEL version="1.0" description="A \"quoted\" app"`, Instruction{Label: []KeyValue{{"version", "1.0"}, {"description", `A "quoted" app`}}}},
		{`LABEL "com.example.vendor"="ACME Inc"`, Instruction{Label: []KeyValue{{"com.example.vendor", "ACME Inc"}}}},
		{`LABEL json='{"a":1}'`, Instruction{Label: []KeyValue{{"json", `{"a":1}`}}}},
		// ARG
		{`ARG VERSION`, Instruction{Arg: &Arg{Name: "VERSION"}}},
		{`ARG VERSION=1.2`, Instruction{Arg: &Arg{Name: "VERSION", Default: ptr("1.2")}}},
		{`ARG GREETING="hello world"`, Instruction{Arg: &Arg{Name: "GREETING", Default: ptr("hello world")}}},
		{`ARG EMPTY=`, Instruction{Arg: &Arg{Name: "EMPTY", Default: ptr("")}}},
		// WORKDIR
		{`WORKDIR /app`, Instruction{Workdir: "/app"}},
		{`WORKDIR src`, Instruction{Workdir: "src"}},
		{`WORKDIR "/my dir"`, Instruction{Workdir: "/my dir"}},
		{`WORKDIR $HOME/app`, Instruction{Workdir: "$HOME/app"}},
		// USER
		{`USER app`, Instruction{User: "app"}},
		{`USER 1000`, Instruction{User: "1000"}},
		{`USER app:staff`, Instruction{User: "app:staff"}},
		{`USER 1000:1000`, Instruction{User: "1000:1000"}},
		{`USER ${UID}:${GID}`, Instruction{User: "${UID}:${GID}"}},
		// EXPOSE
		{`EXPOSE 80`, Instruction{Expose: []string{"80/tcp"}}},
		{`EXPOSE 80/tcp 53/udp 8000-8010 9000/UDP 132/sctp`, Instruction{Expose: []string{"80/tcp", "53/udp", "8000-8010/tcp", "9000/udp", "132/sctp"}}},
		{`EXPOSE $PORT "8080"`, Instruction{Expose: []string{"$PORT", "8080/tcp"}}},
		// HEALTHCHECK
		{`HEALTHCHECK NONE`, Instruction{Healthcheck: &Healthcheck{None: true}}},
		{`healthcheck none`, Instruction{Cmd: "HEALTHCHECK", Healthcheck: &Healthcheck{None: true}}},
		{`HEALTHCHECK CMD curl -f http://localhost/ || exit 1`, Instruction{Healthcheck: &Healthcheck{Command: Command{Shell: true, Args: []string{"curl -f http://localhost/ || exit 1"}}}}},
		{`HEALTHCHECK --interval=5m --timeout=3s --start-period=10s --start-interval=1s --retries=3 CMD ["/bin/check", "-q"]`,
			Instruction{Healthcheck: &Healthcheck{Command: Command{Args: []string{"/bin/check", "-q"}}, Interval: 5 * time.Minute, Timeout: 3 * time.Second, StartPeriod: 10 * time.Second, StartInterval: time.Second, Retries: 3}}},
		{`HEALTHCHECK --retries=0 --interval=0s cmd true`, Instruction{Healthcheck: &Healthcheck{Command: Command{Shell: true, Args: []string{"true"}}}}},
	}
	for _, tt := range tests {
		f := parse(t, "FROM alpine\n"+tt.src+"\n")
		if len(f.Instructions) != 2 {
			t.Errorf("%s: got %d instructions, want 2", tt.src, len(f.Instructions))
			continue
		}
		want := tt.want
		want.Line, want.EndLine = 2, 2
		want.Original = strings.TrimSpace(tt.src)
		if want.Cmd == "" {
			want.Cmd = strings.ToUpper(strings.Fields(tt.src)[0])
		}
		if got := f.Instructions[1]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", tt.src, got, want)
		}
	}
}

func TestFrom(t *testing.T) {
	tests := []struct {
		src  string
		want From
	}{
		{"FROM alpine", From{Image: "alpine"}},
		{"FROM scratch", From{Image: "scratch"}},
		{"FROM python:3.12-slim AS App", From{Image: "python:3.12-slim", As: "app"}},
		{"from python:3.12-slim as build-stage.1", From{Image: "python:3.12-slim", As: "build-stage.1"}},
		{"FROM --platform=linux/amd64 debian:bookworm", From{Image: "debian:bookworm", Platform: "linux/amd64"}},
		{"FROM --platform=$BUILDPLATFORM golang", From{Image: "golang", Platform: "$BUILDPLATFORM"}},
		{"FROM registry.example.com:5000/team/app:v1@sha256:" + strings.Repeat("a", 64), From{Image: "registry.example.com:5000/team/app:v1@sha256:" + strings.Repeat("a", 64)}},
		{"FROM ${BASE}:${TAG:-latest}", From{Image: "${BASE}:${TAG:-latest}"}},
		{`FROM "alpine"`, From{Image: "alpine"}},
	}
	for _, tt := range tests {
		f := parse(t, tt.src)
		in := f.Instructions[0]
		if in.Cmd != "FROM" || in.Line != 1 || in.From == nil || *in.From != tt.want {
			t.Errorf("%s: got %+v %+v, want %+v", tt.src, in, in.From, tt.want)
		}
	}
}

func TestGlobalArgs(t *testing.T) {
	f := parse(t, "ARG BASE=python\nARG TAG\nARG A=1 B\nFROM ${BASE}:${TAG}\nARG TAG\nRUN echo $TAG\n")
	want := []Arg{{Name: "BASE", Default: ptr("python")}, {Name: "TAG"}, {Name: "A", Default: ptr("1")}, {Name: "B"}}
	if !reflect.DeepEqual(f.Args, want) {
		t.Errorf("Args = %+v, want %+v", f.Args, want)
	}
	var cmds []string
	for _, in := range f.Instructions {
		cmds = append(cmds, in.Cmd)
	}
	if got := strings.Join(cmds, " "); got != "FROM ARG RUN" {
		t.Errorf("instructions %s, want FROM ARG RUN", got)
	}
	// Several names in one ARG inside the stage: one instruction each.
	f = parse(t, "FROM a\nARG X=1 Y\n")
	if len(f.Instructions) != 3 || f.Instructions[1].Arg.Name != "X" || f.Instructions[2].Arg.Name != "Y" ||
		f.Instructions[2].Line != 2 || f.Instructions[2].Original != "ARG X=1 Y" {
		t.Errorf("ARG X=1 Y: %+v", f.Instructions)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		{"FROM a\nFOOO bar", `Dockerfile:2: unknown instruction "FOOO"`},
		{"FROM a\n\n  fooo bar", `Dockerfile:3: unknown instruction "FOOO"`},
		{"", "Dockerfile: no FROM instruction"},
		{"# just a comment\n\n", "Dockerfile: no FROM instruction"},
		{"ARG A=1\n", "Dockerfile: no FROM instruction"},
		{"RUN echo\nFROM a", "Dockerfile:1: RUN before FROM"},
		{"ARG X\nLABEL a=b\nFROM a", "Dockerfile:2: LABEL before FROM"},
		{"FROM a\nRUN x\nFROM b", "Dockerfile:3: multi-stage builds are not supported"},
		{"FROM a AS b\nFROM b", "Dockerfile:2: multi-stage builds are not supported"},
		{"FROM", "Dockerfile:1: FROM requires an argument"},
		{"FROM a b", "Dockerfile:1: FROM requires either one or three arguments"},
		{"FROM a IS b", "Dockerfile:1: FROM requires either one or three arguments"},
		{"FROM a AS 1st", "Dockerfile:1: invalid name for build stage"},
		{"FROM Alpine", `Dockerfile:1: invalid image reference "Alpine"`},
		{"FROM alpine:", `Dockerfile:1: invalid image reference "alpine:"`},
		{`FROM ""`, `Dockerfile:1: FROM requires an image`},
		{"FROM --platform linux/amd64 a", "Dockerfile:1: missing a value on flag --platform for FROM"},
		{"FROM --foo=1 a", "Dockerfile:1: unknown flag --foo for FROM"},
		{"FROM a\nRUN", "Dockerfile:2: RUN requires an argument"},
		{"FROM a\nRUN   ", "Dockerfile:2: RUN requires an argument"},
		{"FROM a\nRUN []", "Dockerfile:2: RUN requires at least one argument"},
		{"FROM a\nRUN [1, 2]", "Dockerfile:2: RUN: when using JSON array syntax, arrays must be comprised of strings only"},
		{"FROM a\nRUN --mount=type=cache,target=/root/.cache pip install x", "Dockerfile:2: RUN --mount is not supported"},
		{"FROM a\nRUN --network=none true", "Dockerfile:2: RUN --network is not supported"},
		{"FROM a\nRUN --foo true", "Dockerfile:2: unknown flag --foo for RUN"},
		{"FROM a\nRUN <<EOF\necho hi\nEOF", "Dockerfile:2: heredocs are not supported"},
		{"FROM a\nRUN cat <<-'END' > /x\nEND", "Dockerfile:2: heredocs are not supported"},
		{"FROM a\nRUN python3 2<<\"EOF\"", "Dockerfile:2: heredocs are not supported"},
		{"FROM a\nCOPY <<EOF /etc/x\nhi\nEOF", "Dockerfile:2: heredocs are not supported"},
		{"FROM a\nCMD", "Dockerfile:2: CMD requires an argument"},
		{"FROM a\nENTRYPOINT", "Dockerfile:2: ENTRYPOINT requires an argument"},
		{"FROM a\nSHELL /bin/bash -c", "Dockerfile:2: SHELL requires the arguments to be in JSON form"},
		{"FROM a\nSHELL []", "Dockerfile:2: SHELL requires at least one argument"},
		{"FROM a\nSHELL", "Dockerfile:2: SHELL requires an argument"},
		{"FROM a\nCOPY", "Dockerfile:2: COPY requires an argument"},
		{"FROM a\nCOPY onlyone", "Dockerfile:2: COPY requires at least one source and a destination"},
		{`FROM a` + "\n" + `COPY ["onlyone"]`, "Dockerfile:2: COPY requires at least one source and a destination"},
		{"FROM a\nCOPY --chown=a", "Dockerfile:2: COPY requires an argument"},
		{"FROM a\nCOPY --from=build /app /app", "Dockerfile:2: COPY --from is not supported"},
		{"FROM a\nCOPY --link a b", "Dockerfile:2: COPY --link is not supported"},
		{"FROM a\nCOPY --parents a/b c", "Dockerfile:2: COPY --parents is not supported"},
		{"FROM a\nCOPY --exclude=*.pyc . /app", "Dockerfile:2: COPY --exclude is not supported"},
		{"FROM a\nADD --checksum=sha256:abc x /y", "Dockerfile:2: ADD --checksum is not supported"},
		{"FROM a\nCOPY --chmod=999 a b", `Dockerfile:2: COPY: invalid --chmod "999"`},
		{"FROM a\nCOPY --chmod=u+x a b", `Dockerfile:2: COPY: invalid --chmod "u+x"`},
		{"FROM a\nCOPY --chown a b", "Dockerfile:2: missing a value on flag --chown for COPY"},
		{"FROM a\nCOPY --chown=a:b:c a b", `Dockerfile:2: COPY: invalid --chown "a:b:c"`},
		{"FROM a\nCOPY --chown=a --chown=b a b", "Dockerfile:2: duplicate flag --chown for COPY"},
		{`FROM a` + "\n" + `COPY "a b" /c`, `Dockerfile:2: COPY: unmatched quote in "\"a"; a path with blanks needs the JSON form`},
		{"FROM a\nADD https://example.com/x.tgz /x", "Dockerfile:2: ADD from a URL is not supported; use RUN with curl"},
		{"FROM a\nADD local HTTP://example.com/x /x", "Dockerfile:2: ADD from a URL is not supported; use RUN with curl"},
		{"FROM a\nADD git@github.com:moby/buildkit.git /src", "Dockerfile:2: ADD from a URL is not supported; use RUN with curl"},
		{"FROM a\nADD git://example.com/repo /src", "Dockerfile:2: ADD from a URL is not supported; use RUN with curl"},
		{"FROM a\nCOPY http://example.com/x /x", `Dockerfile:2: COPY source can't be a URL`},
		{"FROM a\nENV", "Dockerfile:2: ENV requires an argument"},
		{"FROM a\nENV A", "Dockerfile:2: ENV A: missing value; use ENV A=value"},
		{"FROM a\nENV A=1 B", `Dockerfile:2: ENV: can't find = in "B"; use name=value`},
		{"FROM a\nENV =x", "Dockerfile:2: ENV names can not be blank"},
		{"FROM a\nENV A='x", "Dockerfile:2: ENV: unexpected end of statement while looking for matching single-quote"},
		{"FROM a\nENV A=${B", "Dockerfile:2: ENV: syntax error: missing '}'"},
		{"FROM a\nENV A=${B#x}", "Dockerfile:2: ENV: unsupported modifier (#) in substitution"},
		{"FROM a\nLABEL", "Dockerfile:2: LABEL requires an argument"},
		{"FROM a\nLABEL a=b c", `Dockerfile:2: LABEL: can't find = in "c"`},
		{"FROM a\nARG", "Dockerfile:2: ARG requires an argument"},
		{"FROM a\nARG =1", "Dockerfile:2: ARG names can not be blank"},
		{"ARG", "Dockerfile:1: ARG requires an argument"},
		{"FROM a\nWORKDIR", "Dockerfile:2: WORKDIR requires an argument"},
		{`FROM a` + "\n" + `WORKDIR ""`, "Dockerfile:2: WORKDIR requires a non-empty path"},
		{"FROM a\nUSER", "Dockerfile:2: USER requires an argument"},
		{"FROM a\nUSER a b", `Dockerfile:2: invalid USER "a b"`},
		{"FROM a\nUSER :1", `Dockerfile:2: invalid USER ":1"`},
		{"FROM a\nUSER a:", `Dockerfile:2: invalid USER "a:"`},
		{"FROM a\nEXPOSE", "Dockerfile:2: EXPOSE requires an argument"},
		{"FROM a\nEXPOSE http", `Dockerfile:2: EXPOSE: invalid port "http"`},
		{"FROM a\nEXPOSE 0", `Dockerfile:2: EXPOSE: invalid port "0"`},
		{"FROM a\nEXPOSE 80 65536", `Dockerfile:2: EXPOSE: invalid port "65536"`},
		{"FROM a\nEXPOSE -1", `Dockerfile:2: EXPOSE: invalid port "-1"`},
		{"FROM a\nEXPOSE 80/xyz", `Dockerfile:2: EXPOSE: invalid protocol in port "80/xyz"`},
		{"FROM a\nEXPOSE 90-80", `Dockerfile:2: EXPOSE: invalid port range "90-80"`},
		{"FROM a\nEXPOSE 127.0.0.1:80:80", `Dockerfile:2: EXPOSE: invalid port`},
		{"FROM a\nHEALTHCHECK", "Dockerfile:2: HEALTHCHECK requires an argument"},
		{"FROM a\nHEALTHCHECK --interval=5s", "Dockerfile:2: HEALTHCHECK requires NONE or CMD"},
		{"FROM a\nHEALTHCHECK NONE x", "Dockerfile:2: HEALTHCHECK NONE takes no arguments"},
		{"FROM a\nHEALTHCHECK --interval=1s NONE", "Dockerfile:2: HEALTHCHECK NONE takes no arguments"},
		{"FROM a\nHEALTHCHECK CMD", "Dockerfile:2: missing command after HEALTHCHECK CMD"},
		{"FROM a\nHEALTHCHECK CMD []", "Dockerfile:2: missing command after HEALTHCHECK CMD"},
		{"FROM a\nHEALTHCHECK RUN true", `Dockerfile:2: unknown type "RUN" in HEALTHCHECK (try CMD)`},
		{"FROM a\nHEALTHCHECK --interval=5 CMD true", `Dockerfile:2: HEALTHCHECK: invalid --interval "5"`},
		{"FROM a\nHEALTHCHECK --timeout=1us CMD true", `Dockerfile:2: HEALTHCHECK: --timeout cannot be less than 1ms`},
		{"FROM a\nHEALTHCHECK --retries=-1 CMD true", `Dockerfile:2: HEALTHCHECK: invalid --retries "-1"`},
		{"FROM a\nHEALTHCHECK --retries=x CMD true", `Dockerfile:2: HEALTHCHECK: invalid --retries "x"`},
		{"FROM a\nHEALTHCHECK --start-period CMD true", "Dockerfile:2: missing a value on flag --start-period for HEALTHCHECK"},
		{"FROM a\nONBUILD RUN true", "Dockerfile:2: ONBUILD is not supported"},
		{"FROM a\nMAINTAINER", "Dockerfile:2: MAINTAINER requires an argument"},
		{"FROM a\nVOLUME", "Dockerfile:2: VOLUME requires an argument"},
		{"FROM a\nSTOPSIGNAL", "Dockerfile:2: STOPSIGNAL requires an argument"},
		{"FROM a\nENV --x=1 A=1", "Dockerfile:2: unknown flag --x for ENV"},
		// Line numbers of instructions that span lines are their first.
		{"FROM a\n\nRUN true && \\\n  false\nRUN \\\n\n  --mount=type=secret,id=x \\\n cat x", "Dockerfile:5: RUN --mount is not supported"},
		{"FROM a\n# c\nCOPY \\\n  # c\n  a", "Dockerfile:3: COPY requires at least one source and a destination"},
		// Directives.
		{"# escape=x\nFROM a", `Dockerfile:1: invalid escape token "x"`},
		{"# escape=`\n# escape=\\\nFROM a", "Dockerfile:2: only one escape parser directive can be used"},
	}
	for _, tt := range tests {
		_, err := Parse(strings.NewReader(tt.src))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error:\n got %v\nwant %s...", tt.src, err, tt.want)
			continue
		}
		var perr *Error
		if !errors.As(err, &perr) {
			t.Errorf("Parse(%q) error %T is not *Error", tt.src, err)
		}
	}
}

func TestSizeLimit(t *testing.T) {
	big := "FROM a\n" + strings.Repeat("# padding padding padding\n", MaxSize/26+1)
	if _, err := Parse(strings.NewReader(big)); err == nil || err.Error() != "Dockerfile: file is larger than 1 MiB" {
		t.Errorf("oversized: %v", err)
	}
	ok := "FROM a\n" + strings.Repeat("#", MaxSize-len("FROM a\n"))
	if _, err := Parse(strings.NewReader(ok)); err != nil {
		t.Errorf("exactly 1 MiB: %v", err)
	}
	// A long line is fine.
	long := "FROM a\nRUN echo " + strings.Repeat("x", 200000) + "\n"
	f := parse(t, long)
	if len(f.Instructions[1].Run.Command.Args[0]) != 200005 {
		t.Error("long RUN line truncated")
	}
}

func TestContinuations(t *testing.T) {
	src := "FROM alpine\n" +
		"RUN apk add --no-cache \\\n" + // 2
		"    # a comment inside the instruction\n" +
		"  python3 \\\n" +
		"\n" + // an empty continuation line: skipped, with a warning
		"      py3-pip \\   \n" + // blanks after the escape
		"#another comment\n" +
		"\t&& echo done\n" + // 8
		"\n" +
		"  # indented comment\n" +
		"ENV A=1 \\\n" + // 11
		"    B=2\n" +
		"RUN echo \\\n" + // 13: continuation to end of file
		""
	f := parse(t, src)
	if len(f.Instructions) != 4 {
		t.Fatalf("got %d instructions", len(f.Instructions))
	}
	run := f.Instructions[1]
	wantRun := "apk add --no-cache   python3       py3-pip \t&& echo done"
	if run.Line != 2 || run.EndLine != 8 || run.Run.Command.Args[0] != wantRun || run.Original != "RUN "+wantRun {
		t.Errorf("RUN: lines %d-%d, %q, original %q", run.Line, run.EndLine, run.Run.Command.Args[0], run.Original)
	}
	env := f.Instructions[2]
	if env.Line != 11 || env.EndLine != 12 || !reflect.DeepEqual(env.Env, []KeyValue{{"A", "1"}, {"B", "2"}}) {
		t.Errorf("ENV: %+v", env)
	}
	last := f.Instructions[3]
	if last.Line != 13 || last.EndLine != 13 || last.Run.Command.Args[0] != "echo" {
		t.Errorf("last RUN: %+v %+v", last, last.Run)
	}
	if len(f.Warnings) != 1 || !strings.HasPrefix(f.Warnings[0], "Dockerfile:5: empty continuation line") {
		t.Errorf("warnings: %q", f.Warnings)
	}

	// CRLF line endings and a byte-order mark.
	f = parse(t, "\uFEFFFROM alpine\r\nRUN a \\\r\n  b\r\n")
	if got := f.Instructions[1].Run.Command.Args[0]; got != "a   b" {
		t.Errorf("CRLF: %q", got)
	}
	// A '#' after the start of a line is not a comment.
	f = parse(t, "FROM alpine\nRUN echo # not a comment\n")
	if got := f.Instructions[1].Run.Command.Args[0]; got != "echo # not a comment" {
		t.Errorf("mid-line #: %q", got)
	}
}

func TestEscapeDirective(t *testing.T) {
	src := "# escape=`\n" +
		"\n" +
		"FROM mcr.microsoft.com/windows/servercore\n" +
		"COPY testfile.txt c:\\\n" + // '\' is no longer special
		"RUN dir c:\\ `\n" +
		"  && echo done\n" +
		"ENV DIR=C:\\app MSG=a`$b\n"
	f := parse(t, src)
	in := f.Instructions
	if len(in) != 4 {
		t.Fatalf("got %d instructions", len(in))
	}
	if in[1].Copy.Dest != `c:\` || in[1].Line != 4 {
		t.Errorf("COPY: %+v", in[1].Copy)
	}
	if got := in[2].Run.Command.Args[0]; got != `dir c:\   && echo done` || in[2].EndLine != 6 {
		t.Errorf("RUN: %q", got)
	}
	if want := []KeyValue{{"DIR", `C:\app`}, {"MSG", `a\$b`}}; !reflect.DeepEqual(in[3].Env, want) {
		t.Errorf("ENV: %q, want %q", in[3].Env, want)
	}
	if v, _ := Expand(in[3].Env[1].Value, nil); v != "a$b" {
		t.Errorf("MSG expands to %q", v)
	}

	// Directive names and spacing are flexible; it must come first.
	for _, src := range []string{"#escape=`\nFROM a\nRUN x `\n y", "  #  ESCAPE = ` \nFROM a\nRUN x `\n y"} {
		if got := parse(t, src).Instructions[1].Run.Command.Args[0]; got != "x  y" {
			t.Errorf("%q: %q", src, got)
		}
	}
	// Not first (after a comment, a blank line, an instruction or an
	// unknown directive): just a comment, so '\' still continues lines.
	for _, src := range []string{
		"# hello\n# escape=`\nFROM a\nRUN x \\\n y",
		"\n# escape=`\nFROM a\nRUN x \\\n y",
		"FROM a\n# escape=`\nRUN x \\\n y",
		"# foo=bar\n# escape=`\nFROM a\nRUN x \\\n y",
	} {
		if got := parse(t, src).Instructions[1].Run.Command.Args[0]; got != "x  y" {
			t.Errorf("%q: %q", src, got)
		}
	}
}

func TestWarnings(t *testing.T) {
	src := "# syntax=docker/dockerfile:1.7\n" +
		"# check=skip=all\n" +
		"FROM alpine\n" +
		"MAINTAINER someone@example.com\n" +
		"STOPSIGNAL SIGTERM\n" +
		"VOLUME /data\n" +
		"ENV OLD style value\n" +
		"RUN true\n"
	f := parse(t, src)
	want := []string{
		`Dockerfile:1: syntax directive "docker/dockerfile:1.7" is ignored; Warden uses its own Dockerfile parser`,
		"Dockerfile:2: check directive is ignored",
		"Dockerfile:4: MAINTAINER is deprecated and ignored; use LABEL",
		"Dockerfile:5: STOPSIGNAL is ignored; Warden stops sandboxes itself",
		"Dockerfile:6: VOLUME is ignored; sandboxes have no volumes",
		`Dockerfile:7: legacy "ENV key value" form; use "ENV key=value"`,
	}
	if !reflect.DeepEqual(f.Warnings, want) {
		t.Errorf("warnings:\n%s", strings.Join(f.Warnings, "\n"))
	}
	var cmds []string
	for _, in := range f.Instructions {
		cmds = append(cmds, in.Cmd)
	}
	if got := strings.Join(cmds, " "); got != "FROM ENV RUN" {
		t.Errorf("instructions: %s", got)
	}
}

func TestJSONArrayOfNonStrings(t *testing.T) {
	// Docker falls back to the shell form for text that is not a JSON
	// array, but refuses a JSON array of other things.
	f := parse(t, "FROM a\nCMD [echo hi]\nCMD [\"a\" \"b\"]\n")
	if c := f.Instructions[1].CmdCommand; !c.Shell || c.Args[0] != "[echo hi]" {
		t.Errorf("CMD [echo hi]: %+v", c)
	}
	if c := f.Instructions[2].CmdCommand; !c.Shell {
		t.Errorf(`CMD ["a" "b"]: %+v`, c)
	}
	for _, src := range []string{`CMD [true]`, `CMD ["a", 1]`, `ENTRYPOINT [null]`, `SHELL [["sh"]]`, `HEALTHCHECK CMD [1]`, `COPY [1, "b"]`} {
		if _, err := Parse(strings.NewReader("FROM a\n" + src)); err == nil || !strings.Contains(err.Error(), "Dockerfile:2:") || !strings.Contains(err.Error(), "strings only") {
			t.Errorf("%s: %v", src, err)
		}
	}
}

const pythonDockerfile = `# syntax=docker/dockerfile:1

# A typical Python web app.
ARG PYTHON_VERSION=3.12

FROM --platform=linux/amd64 python:${PYTHON_VERSION}-slim AS app

LABEL org.opencontainers.image.title="demo app" \
      org.opencontainers.image.version="1.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    APP_HOME=/srv/app

ARG PYTHON_VERSION
ARG UID=10001

RUN adduser \
    --disabled-password \
    --gecos "" \
    --home "/nonexistent" \
    --shell "/sbin/nologin" \
    --no-create-home \
    --uid "${UID}" \
    appuser

WORKDIR $APP_HOME

# Install dependencies first, for caching.
COPY requirements.txt .
RUN python -m pip install -r requirements.txt \
 # comments between continuation lines are dropped
 && rm -rf /root/.cache

COPY --chown=appuser:appuser . .

USER appuser

EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:8000/health')"

ENTRYPOINT ["python", "-m"]
CMD ["gunicorn", "app:app", "--bind=0.0.0.0:8000"]
`

func TestPythonDockerfile(t *testing.T) {
	f := parse(t, pythonDockerfile)
	if want := []Arg{{Name: "PYTHON_VERSION", Default: ptr("3.12")}}; !reflect.DeepEqual(f.Args, want) {
		t.Errorf("Args = %+v", f.Args)
	}
	if len(f.Warnings) != 1 || !strings.HasPrefix(f.Warnings[0], "Dockerfile:1: syntax directive") {
		t.Errorf("Warnings = %q", f.Warnings)
	}
	want := []Instruction{
		{Line: 6, EndLine: 6, Cmd: "FROM", Original: "FROM --platform=linux/amd64 python:${PYTHON_VERSION}-slim AS app",
			From: &From{Image: "python:${PYTHON_VERSION}-slim", Platform: "linux/amd64", As: "app"}},
		{Line: 8, EndLine: 9, Cmd: "LABEL", Original: `LABEL org.opencontainers.image.title="demo app"       org.opencontainers.image.version="1.0"`,
			Label: []KeyValue{{"org.opencontainers.image.title", "demo app"}, {"org.opencontainers.image.version", "1.0"}}},
		{Line: 11, EndLine: 14, Cmd: "ENV", Original: "ENV PYTHONDONTWRITEBYTECODE=1     PYTHONUNBUFFERED=1     PIP_NO_CACHE_DIR=1     APP_HOME=/srv/app",
			Env: []KeyValue{{"PYTHONDONTWRITEBYTECODE", "1"}, {"PYTHONUNBUFFERED", "1"}, {"PIP_NO_CACHE_DIR", "1"}, {"APP_HOME", "/srv/app"}}},
		{Line: 16, EndLine: 16, Cmd: "ARG", Original: "ARG PYTHON_VERSION", Arg: &Arg{Name: "PYTHON_VERSION"}},
		{Line: 17, EndLine: 17, Cmd: "ARG", Original: "ARG UID=10001", Arg: &Arg{Name: "UID", Default: ptr("10001")}},
		{Line: 19, EndLine: 26, Cmd: "RUN",
			Original: `RUN adduser     --disabled-password     --gecos ""     --home "/nonexistent"     --shell "/sbin/nologin"     --no-create-home     --uid "${UID}"     appuser`,
			Run:      &Run{Command{Shell: true, Args: []string{`adduser     --disabled-password     --gecos ""     --home "/nonexistent"     --shell "/sbin/nologin"     --no-create-home     --uid "${UID}"     appuser`}}}},
		{Line: 28, EndLine: 28, Cmd: "WORKDIR", Original: "WORKDIR $APP_HOME", Workdir: "$APP_HOME"},
		{Line: 31, EndLine: 31, Cmd: "COPY", Original: "COPY requirements.txt .", Copy: &Copy{Sources: []string{"requirements.txt"}, Dest: "."}},
		{Line: 32, EndLine: 34, Cmd: "RUN", Original: "RUN python -m pip install -r requirements.txt  && rm -rf /root/.cache",
			Run: &Run{Command{Shell: true, Args: []string{"python -m pip install -r requirements.txt  && rm -rf /root/.cache"}}}},
		{Line: 36, EndLine: 36, Cmd: "COPY", Original: "COPY --chown=appuser:appuser . .", Copy: &Copy{Sources: []string{"."}, Dest: ".", Chown: "appuser:appuser"}},
		{Line: 38, EndLine: 38, Cmd: "USER", Original: "USER appuser", User: "appuser"},
		{Line: 40, EndLine: 40, Cmd: "EXPOSE", Original: "EXPOSE 8000", Expose: []string{"8000/tcp"}},
		{Line: 42, EndLine: 43, Cmd: "HEALTHCHECK",
			Original: `HEALTHCHECK --interval=30s --timeout=5s --retries=3   CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:8000/health')"`,
			Healthcheck: &Healthcheck{Interval: 30 * time.Second, Timeout: 5 * time.Second, Retries: 3,
				Command: Command{Shell: true, Args: []string{`python -c "import urllib.request; urllib.request.urlopen('http://localhost:8000/health')"`}}}},
		{Line: 45, EndLine: 45, Cmd: "ENTRYPOINT", Original: `ENTRYPOINT ["python", "-m"]`, Entrypoint: &Command{Args: []string{"python", "-m"}}},
		{Line: 46, EndLine: 46, Cmd: "CMD", Original: `CMD ["gunicorn", "app:app", "--bind=0.0.0.0:8000"]`, CmdCommand: &Command{Args: []string{"gunicorn", "app:app", "--bind=0.0.0.0:8000"}}},
	}
	if len(f.Instructions) != len(want) {
		t.Fatalf("got %d instructions, want %d", len(f.Instructions), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(f.Instructions[i], want[i]) {
			t.Errorf("instruction %d:\n got %#v\nwant %#v", i, f.Instructions[i], want[i])
		}
	}

	// What a builder does next: expand with the ARGs and ENVs in scope.
	vars := map[string]string{"PYTHON_VERSION": "3.12"}
	img, err := Expand(f.Instructions[0].From.Image, mapLookup(vars))
	if err != nil || img != "python:3.12-slim" {
		t.Errorf("FROM expands to %q, %v", img, err)
	}
	vars["APP_HOME"] = "/srv/app"
	if dir, err := Expand(f.Instructions[6].Workdir, mapLookup(vars)); err != nil || dir != "/srv/app" {
		t.Errorf("WORKDIR expands to %q, %v", dir, err)
	}
}

func TestNormalizePort(t *testing.T) {
	for in, want := range map[string]string{"80": "80/tcp", "080/TCP": "80/tcp", "53/udp": "53/udp", "1-65535/sctp": "1-65535/sctp"} {
		if got, err := NormalizePort(in); err != nil || got != want {
			t.Errorf("NormalizePort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/tcp", "80/", "a", "1-", "-1", "99999", "+80", "80-70", "1-2-3", "80/tcp/udp"} {
		if got, err := NormalizePort(in); err == nil {
			t.Errorf("NormalizePort(%q) = %q, want an error", in, got)
		}
	}
}
