package cli

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func templateCmd() *command {
	return &command{
		name:    "template",
		aliases: []string{"templates"},
		short:   "Build, import, list and remove sandbox templates",
		long: "Manage templates: the read-only root filesystems sandboxes boot from, with their\n" +
			"default environment, user, working directory and start command. \"base\" is built in.",
		subs: []*command{
			templateBuildCmd(),
			templateImportCmd(),
			templateLsCmd(),
			templateInspectCmd(),
			templateRmCmd(),
			templateDuCmd(),
			templateGCCmd(),
		},
	}
}

// progress shows build and import events: bars on a terminal, plain lines otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	bar   *progressbar.ProgressBar
	layer string
	now   func() time.Time
	// start is when the layer being shown sent its first event; its rate
	// is the compressed bytes read over the time since.
	start time.Time
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, tty: ok && term.IsTerminal(int(f.Fd())), now: time.Now}
}

// phaseLabel names an import phase as a person reads it. The daemon streams
// each layer: "download" events count compressed bytes read while the files
// are extracted from them, and "extract" is the finish (the content digest
// checked, the layer published), so they read as extracting and verifying.
func phaseLabel(phase string) string {
	switch phase {
	case "download":
		return "extracting"
	case "extract":
		return "verifying"
	}
	return phase
}

// rate formats n bytes over d as a rate, or "" when d is too short to mean
// anything.
func rate(n int64, d time.Duration) string {
	if n <= 0 || d < time.Millisecond {
		return ""
	}
	return sizeOf(int64(float64(n)/d.Seconds())) + "/s"
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
}

func (p *progress) event(ev warden.TemplateEvent) {
	switch ev.Type {
	case "step":
		p.finish()
		fmt.Fprintf(p.w, "Step %d/%d (line %d): %s\n", ev.Step, ev.Steps, ev.Line, ev.Text)
	case "cached":
		fmt.Fprintf(p.w, " ---> cached\n")
	case "log":
		if p.bar != nil {
			p.bar.Clear()
		}
		fmt.Fprintf(p.w, "  %s\n", ev.Text)
	case "done":
		// The command prints the result itself, once.
		p.finish()
	case "progress":
		label := fmt.Sprintf("layer %d/%d %s", ev.Index+1, ev.Count, shortDigest(ev.Layer))
		if ev.Cached {
			p.finish()
			fmt.Fprintf(p.w, "%s: already stored\n", label)
			return
		}
		if ev.Layer != p.layer {
			// The first event of a layer starts its clock.
			p.finish()
			p.layer, p.start = ev.Layer, p.now()
		}
		switch {
		case ev.Phase == "done":
			if p.bar != nil {
				p.bar.Set64(p.bar.GetMax64())
			}
			p.finish()
			took := p.now().Sub(p.start)
			line := fmt.Sprintf("%s: %s read and extracted in %.1f s", label, sizeOf(ev.Total), took.Seconds())
			if r := rate(ev.Total, took); r != "" {
				line += " (" + r + ")"
			}
			fmt.Fprintln(p.w, line)
			p.layer = ""
		case !p.tty:
			// One line per phase of a layer.
			if ev.Current == 0 || ev.Phase == "extract" {
				fmt.Fprintf(p.w, "%s: %s %s\n", label, phaseLabel(ev.Phase), sizeOf(ev.Total))
			}
		case ev.Phase == "extract":
			// All bytes are in; the digest check is quick. Relabel the bar
			// rather than start one whose rate would mean nothing.
			if p.bar != nil {
				p.bar.Describe(label + " " + phaseLabel(ev.Phase))
			}
		default:
			if p.bar == nil {
				total := ev.Total
				if total <= 0 {
					total = -1
				}
				p.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(p.w),
					progressbar.OptionSetDescription(label+" "+phaseLabel(ev.Phase)), progressbar.OptionShowBytes(true),
					progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100_000_000))
			}
			p.bar.Set64(ev.Current)
		}
	}
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

func sizeOf(n int64) string {
	switch {
	case n <= 0:
		return "0 B"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func templateBuildCmd() *command {
	var (
		file, name string
		args       = kvFlag{}
		noCache    bool
		insecure   bool
		netMode    string
		netAllow   string
		cpu        cpuFlag
		mem, disk  sizeFlag
	)
	c := &command{
		name:  "build",
		args:  "DIR",
		short: "Build a template from a Dockerfile",
		long: "Build a template from a Dockerfile and the build context DIR. Each RUN, COPY, ADD and\n" +
			"WORKDIR step runs in a sandbox; unchanged steps come from the cache. ENTRYPOINT/CMD\n" +
			"become the template's start command and HEALTHCHECK (or LABEL warden.ready.port=PORT)\n" +
			"its ready check. Files matched by DIR/.dockerignore are not sent. RUN steps have no\n" +
			"network unless --network gives them one.",
		examples: []string{
			"warden template build -t myapp:1.0 .",
			"warden template build -f docker/Dockerfile.dev -t myapp:dev --build-arg VERSION=2 .",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&file, "file", "PATH", "the Dockerfile, relative to DIR (default DIR/Dockerfile)", "f")
		fs.String(&name, "tag", "NAME[:TAG]", "name of the template to build (required)", "t")
		fs.Var(&args, "build-arg", "K=V", "a build argument; repeatable")
		fs.Bool(&noCache, "no-cache", "run every step, ignoring the build cache")
		fs.Bool(&insecure, "insecure-registry", "plain HTTP for FROM images (only registries the daemon allows it for)")
		fs.String(&netMode, "network", "MODE", "network of the RUN steps: none (default), open or allowlist")
		fs.String(&netAllow, "allow", "LIST", "with --network allowlist: host names (ports 80 and 443), comma-separated")
		fs.Var(&cpu, "cpu", "CPUS", "CPUs of the build sandboxes, and the template's default, such as 2 or 0.5")
		fs.Var(&mem, "memory", "SIZE", "memory of the build sandboxes, and the template's default, such as 1g")
		fs.Var(&disk, "disk", "SIZE", "the template's default disk size, such as 10G")
	}
	c.run = func(ctx context.Context, r *runner, argv []string) error {
		if len(argv) != 1 {
			return usageErr(c, "want the build context directory")
		}
		if name == "" {
			return usageErr(c, "--tag is required")
		}
		dir := argv[0]
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return usageErr(c, "%s is not a directory", dir)
		}
		if file != "" {
			rel, err := filepath.Rel(dir, filepath.Join(dir, file))
			if err == nil && filepath.IsAbs(file) {
				rel, err = filepath.Rel(dir, file)
			}
			if err != nil || strings.HasPrefix(rel, "..") {
				return usageErr(c, "--file must be inside the build context %s", dir)
			}
			file = filepath.ToSlash(rel)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarContext(dir, pw)) }()
		defer pr.Close()
		p := newProgress(r.env.Stderr)
		res, err := cl.BuildTemplate(ctx, warden.BuildRequest{Name: name, Dockerfile: file, Args: args.m, NoCache: noCache,
			InsecureRegistry: insecure, CPUMillis: int64(cpu.millis), MemoryMB: int64(mem.mib), DiskMB: int64(disk.mib), Network: netMode, Allow: splitList(netAllow)}, pr, p.event)
		p.finish()
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, res)
		}
		fmt.Fprintf(r.env.Stdout, "%s %s (%d steps, %d cached)\n", res.Name, res.ID, res.Steps, res.CacheHits)
		return nil
	}
	return c
}

// tarContext writes dir as a tar stream, leaving out what .dockerignore matches.
func tarContext(dir string, w io.Writer) error {
	ignore := readDockerignore(dir)
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(ignore, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() && link == "" {
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = rel, 0, 0, "", ""
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, io.LimitReader(f, fi.Size()))
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

func readDockerignore(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, ".dockerignore"))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.Trim(filepath.ToSlash(filepath.Clean(l)), "/"))
	}
	return out
}

// ignored reports whether rel matches a .dockerignore pattern (path.Match per pattern,
// also against each parent directory; "!" exceptions re-include).
func ignored(patterns []string, rel string) bool {
	out := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = strings.TrimPrefix(pat, "!")
		match := false
		for p := rel; p != "." && p != "/" && p != ""; p = filepath.ToSlash(filepath.Dir(p)) {
			if ok, _ := filepath.Match(pat, p); ok {
				match = true
				break
			}
		}
		if match {
			out = !neg
		}
	}
	return out
}

func templateImportCmd() *command {
	var (
		name, username, platform, format, tag string
		passwordStdin, insecure, start        bool
	)
	c := &command{
		name:  "import",
		args:  "IMAGE|PATH",
		short: "Import an OCI or Docker image as a template",
		long: "Import an image as a template: from a registry (IMAGE, such as\n" +
			"registry.example.com/team/python:3.12), or from a local PATH holding a `docker save`\n" +
			"tarball, an OCI archive, or an OCI image layout directory. Layers already stored\n" +
			"are not fetched again. With --start the image's ENTRYPOINT and CMD run in every\n" +
			"new sandbox.",
		examples: []string{
			"warden template import ./python.tar -t python:3.12",
			"warden template import ./oci-layout-dir -t tools",
			"echo \"$TOKEN\" | warden template import reg.example.com/app:1 -t app --username ci --password-stdin",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&name, "tag", "NAME[:TAG]", "name of the template (required)", "t")
		fs.String(&username, "username", "USER", "registry user name")
		fs.Bool(&passwordStdin, "password-stdin", "read the registry password from stdin")
		fs.Bool(&insecure, "insecure", "plain HTTP (only registries the daemon allows it for)")
		fs.String(&platform, "platform", "OS/ARCH", "which image of a multi-platform index (default linux/amd64)")
		fs.String(&format, "format", "FORMAT", "docker-archive or oci-archive for a PATH (default: detected)")
		fs.String(&tag, "image", "REF", "which image of a multi-image docker-save archive")
		fs.Bool(&start, "start", "make the image's ENTRYPOINT and CMD the start command")
	}
	c.run = func(ctx context.Context, r *runner, argv []string) error {
		if len(argv) != 1 {
			return usageErr(c, "want one image reference or path")
		}
		if name == "" {
			return usageErr(c, "--tag is required")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		p := newProgress(r.env.Stderr)
		defer p.finish()
		var t warden.Template
		src := argv[0]
		st, serr := os.Stat(src)
		if serr != nil && looksLocal(src) {
			return withHint(fmt.Errorf("%s: no such file or directory", src), "give the path of a docker-save or OCI archive, or an image reference such as docker.io/library/python:3.12")
		}
		if serr == nil {
			var body io.Reader
			if st.IsDir() {
				if _, err := os.Stat(filepath.Join(src, "oci-layout")); err != nil {
					return usageErr(c, "%s is a directory without an oci-layout file", src)
				}
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(tarContext(src, pw)) }()
				defer pr.Close()
				body, format = pr, "oci-archive"
			} else {
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				body = f
			}
			t, err = cl.ImportArchive(ctx, warden.ArchiveImport{Name: name, Format: format, Tag: tag, Platform: platform, Start: start}, body, p.event)
		} else {
			req := warden.ImportRequest{Name: name, Image: src, Username: username, Insecure: insecure, Platform: platform, Start: start}
			if passwordStdin {
				b, err := io.ReadAll(io.LimitReader(r.env.Stdin, 64<<10))
				if err != nil {
					return err
				}
				req.Password = strings.TrimRight(string(b), "\r\n")
			}
			t, err = cl.ImportTemplate(ctx, req, p.event)
		}
		p.finish()
		if err != nil {
			if ctx.Err() != nil {
				return withHint(ctx.Err(), "the import is cancelled: the daemon stops it when warden goes; layers it already stored are kept and not fetched again")
			}
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, t)
		}
		fmt.Fprintf(r.env.Stdout, "%s %s (%d layers, %s)\n", t.Name, t.ID, t.Layers, sizeOf(t.Size))
		return nil
	}
	return c
}

func templateLsCmd() *command {
	var quiet bool
	c := &command{
		name:    "ls",
		aliases: []string{"list"},
		short:   "List templates",
		long:    "List every template, the built-in base first.",
		json:    true,
	}
	c.flags = func(fs *flagSet) { fs.Bool(&quiet, "quiet", "print only the names", "q") }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListTemplates(ctx)
		if err != nil {
			return err
		}
		switch {
		case r.g.json:
			return printJSON(r.env.Stdout, list)
		case quiet:
			for _, t := range list {
				fmt.Fprintln(r.env.Stdout, t.Name)
			}
			return nil
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tID\tLAYERS\tSIZE\tCREATED\tOWNER\tSOURCE")
		for _, t := range list {
			created := "-"
			if !t.Created.IsZero() {
				created = age(t.Created, r.env.Now())
			}
			size := sizeOf(t.Size)
			if t.Builtin {
				size = "-"
			}
			// A tag without an owner is shared: only admins change it.
			owner := t.Owner
			if owner == "" {
				owner = "shared"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, shortDigest(t.ID), t.Layers, size, created, owner, t.Source)
		}
		return tw.Flush()
	}
	return c
}

func templateInspectCmd() *command {
	c := &command{
		name:  "inspect",
		args:  "NAME",
		short: "Show a template's manifest",
		long:  "Print a template with its manifest (layers, environment, user, start command) as JSON.",
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one template name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		t, err := cl.GetTemplate(ctx, args[0])
		if err != nil {
			return err
		}
		return printJSON(r.env.Stdout, t)
	}
	return c
}

func templateRmCmd() *command {
	var gc bool
	c := &command{
		name:    "rm",
		aliases: []string{"remove"},
		args:    "NAME...",
		short:   "Remove templates",
		long: "Remove template names. Their layers stay until `warden template gc` (or --gc) finds\n" +
			"them unused by any template or running sandbox.",
	}
	c.flags = func(fs *flagSet) { fs.Bool(&gc, "gc", "collect unused layers afterwards") }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one template name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		for _, n := range args {
			if err := cl.DeleteTemplate(ctx, n); err != nil {
				return err
			}
			fmt.Fprintln(r.env.Stdout, n)
		}
		if gc {
			rep, err := cl.GCTemplates(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(r.env.Stdout, "removed %d layers, freed %s\n", rep.Layers, sizeOf(rep.Bytes))
		}
		return nil
	}
	return c
}

func templateDuCmd() *command {
	c := &command{
		name:  "du",
		short: "Show the template store's disk use",
		long:  "Show the disk used by stored layers, per template (shared layers counted once in TOTAL).",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		cl, err := r.client()
		if err != nil {
			return err
		}
		u, err := cl.TemplateDiskUsage(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, u)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TEMPLATE\tSIZE\tUNIQUE")
		for _, t := range u.Templates {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, sizeOf(t.Bytes), sizeOf(t.Unique))
		}
		fmt.Fprintf(tw, "TOTAL\t%s\t%d layers, %s reclaimable\n", sizeOf(u.Bytes), u.Layers, sizeOf(u.Reclaim))
		return tw.Flush()
	}
	return c
}

func templateGCCmd() *command {
	c := &command{
		name:  "gc",
		short: "Remove layers no template or sandbox uses",
		long:  "Remove template versions without a name and layers that no template or running sandbox uses.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		cl, err := r.client()
		if err != nil {
			return err
		}
		rep, err := cl.GCTemplates(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, rep)
		}
		fmt.Fprintf(r.env.Stdout, "removed %d template versions and %d layers, freed %s; %d layers kept\n",
			rep.Manifests, rep.Layers, sizeOf(rep.Bytes), rep.KeptLayers)
		return nil
	}
	return c
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// looksLocal reports whether an import source is meant as a local path: it starts with
// "/", "." or "~", or ends like an archive (.tar, .tar.gz, .tgz, .oci).
func looksLocal(src string) bool {
	if strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~") {
		return true
	}
	for _, ext := range []string{".tar", ".tar.gz", ".tgz", ".oci"} {
		if strings.HasSuffix(strings.ToLower(src), ext) {
			return true
		}
	}
	return false
}
