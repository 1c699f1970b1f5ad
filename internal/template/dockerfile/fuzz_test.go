package dockerfile

import (
	"errors"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	seeds := []string{
		pythonDockerfile,
		"FROM alpine\nRUN echo hi\n",
		"# escape=`\nFROM a\nRUN x `\n y\n",
		"ARG A=1 B\nFROM ${A:-x}\nARG C D=\"e f\"\n",
		"FROM a\nENV A=1 B=\"x y\" C='$D' E=\\$F\nLABEL a=b\nENV OLD style\n",
		"FROM a\nCOPY --chown=u:g --chmod=0644 [\"a b\", \"/c\"]\nADD x.tgz /\n",
		"FROM a\nHEALTHCHECK --interval=1s --retries=2 CMD [\"true\"]\nHEALTHCHECK NONE\n",
		"FROM a\nEXPOSE 80 53/udp 1-2/sctp $P\nUSER a:b\nWORKDIR \"/x y\"\n",
		"FROM a\nSHELL [\"/bin/sh\", \"-c\"]\nCMD [\"a\"]\nENTRYPOINT b c\n",
		"FROM a\nRUN a \\\n # c\n\n b\n",
		"FROM a\nRUN <<EOF\nx\nEOF\n",
		"FROM a\nMAINTAINER x\nVOLUME /v\nSTOPSIGNAL 9\nONBUILD RUN x\n",
		"\uFEFF# syntax=x\r\nFROM a\r\n",
		"FROM a\nRUN --mount=type=cache,target=/x y\n",
		"FROM a\nENV A=${B:-${C:+d}} E=${F?g}\n",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	known := map[string]bool{"FROM": true, "RUN": true, "COPY": true, "ADD": true, "ENV": true, "ARG": true,
		"WORKDIR": true, "USER": true, "EXPOSE": true, "ENTRYPOINT": true, "CMD": true, "LABEL": true,
		"HEALTHCHECK": true, "SHELL": true}
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse(strings.NewReader(src))
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) || perr.Line < 0 || perr.Msg == "" {
				t.Fatalf("error %v (%T) is not a useful *Error", err, err)
			}
			return
		}
		if len(file.Instructions) == 0 || file.Instructions[0].Cmd != "FROM" {
			t.Fatal("success without FROM first")
		}
		for i, in := range file.Instructions {
			if in.Line < 1 || in.EndLine < in.Line || !known[in.Cmd] || in.Original == "" {
				t.Fatalf("bad instruction %d: %+v", i, in)
			}
			if i > 0 && in.Cmd == "FROM" {
				t.Fatal("second FROM accepted")
			}
			set := 0
			for _, b := range []bool{in.From != nil, in.Run != nil, in.Copy != nil, in.Env != nil, in.Arg != nil,
				in.Workdir != "", in.User != "", in.Expose != nil, in.Entrypoint != nil, in.CmdCommand != nil,
				in.Label != nil, in.Healthcheck != nil, in.Shell != nil} {
				if b {
					set++
				}
			}
			if set != 1 {
				t.Fatalf("instruction %d (%s) has %d fields set", i, in.Cmd, set)
			}
		}
		for _, w := range file.Warnings {
			if !strings.HasPrefix(w, "Dockerfile:") {
				t.Fatalf("warning %q does not name the line", w)
			}
		}
	})
}
