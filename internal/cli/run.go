package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// runOptions are the flags of `warden run`.
type runOptions struct {
	lang, context, file, user, saveImages string
	env                                   kvFlag
	timeout                               durationFlag
}

func runCmd() *command {
	o := &runOptions{env: kvFlag{allowBare: true}}
	c := &command{
		name:  "run",
		args:  "ID [CODE | -]",
		short: "Run code in a sandbox's code interpreter",
		long: "Run a cell of Python, JavaScript, TypeScript, bash, R or Java in a stateful interpreter\n" +
			"context of the sandbox: variables, imports and definitions stay for the next run in the\n" +
			"same context. The code is CODE, the file given with -f, or stdin with \"-\" (or when neither\n" +
			"is given). Without --context the default context of --lang runs it.\n" +
			"\n" +
			"stdout and stderr are streamed as they are written; the value of the last expression\n" +
			"is printed after them (its text/plain form). Charts and images among the results (PNG,\n" +
			"JPEG, SVG, PDF, such as matplotlib figures) are saved as files in the current directory\n" +
			"(or --save-images DIR), named result-N-M.EXT, and each path is printed on stderr. With\n" +
			"--json nothing is streamed: the whole execution (output, results with their data, the\n" +
			"error) is printed as one JSON object, and images are saved only with --save-images.\n" +
			"An error in the code prints its traceback on stderr and exits with status 1; Ctrl-C\n" +
			"interrupts the running code.",
		examples: []string{
			"warden run sb-01hzx3k9q2 'x = 21; x * 2'",
			"warden run sb-01hzx3k9q2 --lang js 'await Promise.resolve(42)'",
			"warden run sb-01hzx3k9q2 -f analysis.py --save-images ./charts",
			"warden run --json sb-01hzx3k9q2 '1 + 1' | jq .results",
			"echo 'ls -l' | warden run sb-01hzx3k9q2 --lang bash -",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&o.lang, "lang", "LANG", "python, javascript, typescript, bash, r or java (default: python)", "l")
		fs.String(&o.context, "context", "CTX", "context ID from 'warden contexts create' (excludes --lang)")
		fs.String(&o.file, "file", "FILE", "read the code from FILE", "f")
		fs.String(&o.user, "user", "U", "user of the default context (default: the sandbox's)")
		fs.Var(&o.env, "env", "K=V", "environment variable for this run; repeatable; a bare K copies the local value")
		fs.Var(&o.timeout, "timeout", "DURATION", "interrupt the code after this long, such as 30s (default: no limit)")
		fs.String(&o.saveImages, "save-images", "DIR", "save image results in DIR (default: the current directory;\nwith --json: not saved)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			return usageErr(c, "want a sandbox ID and optionally the code, got %d arguments", len(args))
		}
		if o.lang != "" && o.context != "" {
			return usageErr(c, "--lang and --context cannot be used together: a context has its language")
		}
		if err := o.env.resolve(r.env.Getenv); err != nil {
			return usageErr(c, "--env %v", err)
		}
		var code string
		switch {
		case o.file != "" && len(args) == 2:
			return usageErr(c, "give the code as an argument or with -f, not both")
		case o.file != "":
			b, err := os.ReadFile(o.file)
			if err != nil {
				return err
			}
			code = string(b)
		case len(args) == 2 && args[1] != "-":
			code = args[1]
		default:
			b, err := io.ReadAll(r.env.Stdin)
			if err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
			code = string(b)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		lang := o.lang
		if lang == "" && o.context == "" && o.file != "" {
			lang = langOfFile(o.file)
		}
		req := warden.RunCodeRequest{Code: code, Language: lang, ContextID: o.context, Env: o.env.m, User: o.user, TimeoutSeconds: o.timeout.secs}
		var h warden.CodeHandlers
		if !r.g.json {
			h.OnStdout = func(s string) { io.WriteString(r.env.Stdout, s) }
			h.OnStderr = func(s string) { io.WriteString(r.env.Stderr, s) }
		}
		ex, err := cl.RunCode(ctx, args[0], req, h)
		if err != nil {
			return err
		}
		dir := o.saveImages
		if dir == "" && !r.g.json {
			dir = "."
		}
		var saved []string
		if dir != "" {
			if saved, err = saveImages(ex, dir); err != nil {
				return err
			}
			for _, p := range saved {
				fmt.Fprintf(r.env.Stderr, "saved %s\n", p)
			}
		}
		if r.g.json {
			out := runJSON{ExecutionCount: ex.ExecutionCount, Stdout: strings.Join(ex.Logs.Stdout, ""),
				Stderr: strings.Join(ex.Logs.Stderr, ""), Results: ex.Results, Error: ex.Error, Saved: saved}
			if out.Results == nil {
				out.Results = []warden.CodeResult{}
			}
			if err := printJSON(r.env.Stdout, out); err != nil {
				return err
			}
			if ex.Error != nil {
				return exitCode(1)
			}
			return nil
		}
		for _, res := range ex.Results {
			if res.IsMainResult && res.Text != "" {
				fmt.Fprintln(r.env.Stdout, res.Text)
			}
		}
		if ex.Error != nil {
			tb := strings.TrimRight(ex.Error.Traceback, "\n")
			if tb == "" {
				tb = ex.Error.Name + ": " + ex.Error.Value
			}
			fmt.Fprintln(r.env.Stderr, tb)
			return exitCode(1)
		}
		return nil
	}
	return c
}

// langOfFile guesses the language from a file name's extension ("" for python).
func langOfFile(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".js", ".mjs", ".cjs":
		return warden.LangJavaScript
	case ".ts", ".mts":
		return warden.LangTypeScript
	case ".sh", ".bash":
		return warden.LangBash
	case ".r":
		return warden.LangR
	case ".java", ".jsh":
		return warden.LangJava
	}
	return ""
}

func contextsCmd() *command {
	return &command{
		name:  "contexts",
		short: "Manage a sandbox's code-interpreter contexts",
		long: "Create, list, restart and remove the interpreter contexts 'warden run' runs code in.\n" +
			"Each context is its own interpreter process with its own state.",
		subs: []*command{contextsLsCmd(), contextsCreateCmd(), contextsRestartCmd(), contextsRmCmd()},
	}
}

func contextsLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, args: "ID", short: "List contexts", long: "List the sandbox's interpreter contexts.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.CodeContexts(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			if list == nil {
				list = []warden.CodeContext{}
			}
			return printJSON(r.env.Stdout, list)
		}
		t := newTable(r.env.Stdout, "ID", "LANGUAGE", "CWD")
		for _, x := range list {
			t.row(x.ID, x.Language, x.Cwd)
		}
		return t.flush()
	}
	return c
}

func contextsCreateCmd() *command {
	var req warden.CreateCodeContextRequest
	c := &command{name: "create", args: "ID", short: "Create a context", long: "Start a new interpreter context and print its ID.", json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&req.Language, "lang", "LANG", "python, javascript, typescript, bash, r or java (default: python)", "l")
		fs.String(&req.Cwd, "cwd", "DIR", "working directory (default: the user's home)", "D")
		fs.String(&req.User, "user", "U", "user the interpreter runs as (default: the sandbox's)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		x, err := cl.CreateCodeContext(ctx, args[0], req)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, x)
		}
		fmt.Fprintln(r.env.Stdout, x.ID)
		return nil
	}
	return c
}

func contextsRestartCmd() *command {
	c := &command{name: "restart", args: "ID CTX", short: "Restart a context", long: "Replace the context's interpreter with a fresh one; its state is lost."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a context ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		return cl.RestartCodeContext(ctx, args[0], args[1])
	}
	return c
}

func contextsRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"remove", "delete"}, args: "ID CTX", short: "Remove a context", long: "End the context's interpreter and forget the context."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a context ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		return cl.DeleteCodeContext(ctx, args[0], args[1])
	}
	return c
}

// runJSON is what 'warden run --json' prints.
type runJSON struct {
	ExecutionCount int                 `json:"execution_count"`
	Stdout         string              `json:"stdout"`
	Stderr         string              `json:"stderr"`
	Results        []warden.CodeResult `json:"results"`
	Error          *warden.CodeError   `json:"error"`
	// Saved are the files images were saved to (with --save-images).
	Saved []string `json:"saved,omitempty"`
}

// saveImages writes the image results of ex (PNG, JPEG, SVG, PDF) in dir as
// result-COUNT-N.EXT, never over an existing file, and returns their paths.
func saveImages(ex *warden.Execution, dir string) ([]string, error) {
	var saved []string
	n := 0
	for _, res := range ex.Results {
		for _, img := range []struct {
			data, ext string
			b64       bool
		}{{res.PNG, "png", true}, {res.JPEG, "jpg", true}, {res.SVG, "svg", false}, {res.PDF, "pdf", true}} {
			if img.data == "" {
				continue
			}
			b := []byte(img.data)
			if img.b64 {
				var err error
				if b, err = base64.StdEncoding.DecodeString(img.data); err != nil {
					return saved, fmt.Errorf("decode %s result: %w", img.ext, err)
				}
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return saved, err
			}
			n++
			p, err := createNew(dir, fmt.Sprintf("result-%d-%d", ex.ExecutionCount, n), img.ext, b)
			if err != nil {
				return saved, err
			}
			saved = append(saved, p)
		}
	}
	return saved, nil
}

// createNew writes b to dir/base.ext, or dir/base_2.ext and so on when that exists.
func createNew(dir, base, ext string, b []byte) (string, error) {
	for i := 1; ; i++ {
		name := base + "." + ext
		if i > 1 {
			name = fmt.Sprintf("%s_%d.%s", base, i, ext)
		}
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) && i < 1000 {
			continue
		}
		if err != nil {
			return "", err
		}
		_, werr := f.Write(b)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(p)
			return "", werr
		}
		return p, nil
	}
}
