package api

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warden-sandbox/warden/internal/agent/files"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/build"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/image"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/template"
)

// Bounds of template uploads.
const (
	maxContextBytes   = 4 << 30 // a build context, unpacked
	maxContextEntries = 200_000
	maxDockerfile     = 1 << 20
)

// templateEvent is one line of a build or import stream.
type templateEvent struct {
	Type   string `json:"type"` // step, log, cached, progress, result, error
	Step   int    `json:"step,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Line   int    `json:"line,omitempty"`
	Text   string `json:"text,omitempty"`
	Stream string `json:"stream,omitempty"`
	// progress
	Phase   string `json:"phase,omitempty"`
	Layer   string `json:"layer,omitempty"`
	Index   int    `json:"index,omitempty"`
	Count   int    `json:"count,omitempty"`
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Cached  bool   `json:"cached,omitempty"`
	// result
	Template *template.Info `json:"template,omitempty"`
	Build    *build.Result  `json:"build,omitempty"`
}

// templateActor is the caller, as the template store's ownership checks
// see it: its principal, and whether its key holds the admin scope.
func templateActor(r *http.Request) template.Actor {
	st := stateOf(r)
	a := template.Actor{Principal: st.principal}
	if st.ident != nil {
		a.Admin = st.ident.Has(auth.ScopeAdmin)
	}
	return a
}

// tagDenied turns a refused tag change into a 403 audited as a denial.
func tagDenied(err error) error {
	if errors.Is(err, template.ErrNotOwner) {
		return deny(apierr.Wrap(apierr.CodeForbidden, err.Error(), err))
	}
	return err
}

func (s *Server) templateStore() (*template.Store, error) {
	if s.cfg.Templates == nil {
		return nil, apierr.New(apierr.CodeUnavailable, "this daemon has no template store")
	}
	return s.cfg.Templates, nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	list, err := ts.List()
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"templates": list})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	stateOf(r).target = name
	in, err := ts.Inspect(name)
	if errors.Is(err, template.ErrUnknown) {
		return notFoundf("template %s not found", name)
	}
	if err != nil {
		return err
	}
	// A snapshot is its owner's alone (snapshots.go): named by its
	// manifest id, another principal's snapshot is not found. A template
	// promoted from it is read by its tag.
	if strings.HasPrefix(name, "sha256:") && s.cfg.Snapshots != nil {
		owner, ok, err := s.cfg.Snapshots.OwnerOfTemplate(r.Context(), in.ID)
		if err != nil {
			return err
		}
		if ok && owner != stateOf(r).principal {
			return notFoundf("template %s not found", name)
		}
	}
	return writeJSON(w, http.StatusOK, in)
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	st := stateOf(r)
	st.target = name
	id, err := ts.Remove(name, templateActor(r))
	if errors.Is(err, template.ErrUnknown) {
		return notFoundf("template %s not found", name)
	}
	if err != nil {
		return tagDenied(err)
	}
	// The tag's change: from old_id to nothing (id kept for older readers).
	st.detail["id"] = id
	st.detail["old_id"] = id
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) templateUsage(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	u, err := ts.DiskUsage()
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

func (s *Server) templateGC(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	inUse := func() (map[string]bool, error) { return s.mgr.TemplatesInUse(r.Context()) }
	if s.cfg.Snapshots != nil { // snapshots' files are kept too (snapshots.go)
		inUse = func() (map[string]bool, error) { return s.cfg.Snapshots.KeepAlive(r.Context()) }
	}
	rep, err := ts.GC(inUse)
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["layers_removed"] = fmt.Sprint(rep.Layers)
	st.detail["bytes_freed"] = fmt.Sprint(rep.Bytes)
	if n := len(rep.RemovedManifests); n > 0 {
		st.detail["manifests_removed"] = fmt.Sprint(n)
		ids := rep.RemovedManifests
		if n > maxAuditIDs {
			ids = ids[:maxAuditIDs]
		}
		st.detail["removed_ids"] = ids
	}
	return writeJSON(w, http.StatusOK, rep)
}

// maxAuditIDs bounds the template ids one GC's audit event lists.
const maxAuditIDs = 100

// spool copies a request body to a file under the store's tmp directory.
func spool(ts *template.Store, r io.Reader, name string, limit int64) (string, func(), error) {
	dir, err := ts.TempDir("upload-")
	if err != nil {
		return "", nil, err
	}
	done := func() { os.RemoveAll(dir) }
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		done()
		return "", nil, err
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = apierr.New(apierr.CodePayloadTooLarge, fmt.Sprintf("upload larger than %d bytes", limit))
	}
	if err != nil {
		done()
		return "", nil, err
	}
	return p, done, nil
}

// importRequest is the JSON body of a registry import.
type importRequest struct {
	Name     *string `json:"name"`
	Image    *string `json:"image"`
	Username string  `json:"username"`
	Password string  `json:"password"`
	Token    string  `json:"token"`
	Insecure bool    `json:"insecure"`
	Platform string  `json:"platform"`
	Start    bool    `json:"start"`
}

// importTemplate imports an image: from a registry (JSON body) or from an
// uploaded docker-save or OCI archive (tar body, ?name=&format=).
func (s *Server) importTemplate(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	st := stateOf(r)
	var (
		img     func(ctx context.Context) (imageSource, error)
		name    string
		source  string
		useCmd  bool
		cleanup = func() {}
	)
	defer func() { cleanup() }()
	ct := r.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/json"):
		var q importRequest
		if err := decodeJSON(r, &q, true); err != nil {
			return err
		}
		if q.Name == nil || q.Image == nil || *q.Image == "" {
			return apierr.Validation("name and image are required")
		}
		name, useCmd, source = *q.Name, q.Start, "import "+*q.Image
		if err := s.decide(r, &govern.Action{Template: &govern.Template{Name: *q.Name, Op: "import", Source: *q.Image}}); err != nil {
			return err
		}
		opts := image.RegistryOptions{Username: q.Username, Password: q.Password, Token: q.Token, Insecure: q.Insecure, Platform: q.Platform}
		ref := *q.Image
		img = func(ctx context.Context) (imageSource, error) {
			i, err := s.cfg.Images.FromRegistry(ctx, ref, opts)
			return imageSource{img: i}, err
		}
	case strings.HasPrefix(ct, "application/x-tar"), strings.HasPrefix(ct, "application/octet-stream"):
		q := r.URL.Query()
		name, useCmd = q.Get("name"), q.Get("start") == "true"
		format, platform, tag := q.Get("format"), q.Get("platform"), q.Get("tag")
		if name == "" {
			return apierr.Validation("query parameter name is required")
		}
		if _, _, err := template.ParseName(name); err != nil {
			return err
		}
		st.target = name
		if err := ts.CheckTag(name, templateActor(r)); err != nil {
			return tagDenied(err)
		}
		// Decided before the archive is read.
		src := "archive"
		if format != "" {
			src = format
		}
		if err := s.decide(r, &govern.Action{Template: &govern.Template{Name: name, Op: "import", Source: src}}); err != nil {
			return err
		}
		path, done, err := spool(ts, r.Body, "image.tar", maxContextBytes)
		if err != nil {
			return err
		}
		cleanup = done
		if format == "" {
			if format, err = image.Detect(path); err != nil {
				return apierr.Validation("cannot tell the archive's format: %v", err)
			}
		}
		source = "import " + format + " archive"
		switch format {
		case "docker-archive":
			img = func(context.Context) (imageSource, error) {
				i, err := image.FromDockerArchive(path, tag)
				return imageSource{img: i}, err
			}
		case "oci-archive":
			img = func(context.Context) (imageSource, error) {
				i, clean, err := image.FromOCIArchive(path, platform)
				return imageSource{img: i, cleanup: clean}, err
			}
		default:
			return apierr.Validation("format must be docker-archive or oci-archive (an OCI layout directory is sent as a tar of the directory)")
		}
	default:
		return apierr.New(apierr.CodeBadRequest, "Content-Type must be application/json (registry) or application/x-tar (archive)")
	}
	if _, _, err := template.ParseName(name); err != nil {
		return err
	}
	st.target = name
	st.detail["source"] = source
	by := templateActor(r)
	if err := ts.CheckTag(name, by); err != nil {
		return tagDenied(err)
	}
	unpin := ts.Pin()
	defer unpin()
	src, err := img(r.Context())
	if err != nil {
		return imageError("open image", err)
	}
	if src.cleanup != nil {
		defer src.cleanup()
	}
	out := startNDJSON(w)
	started := time.Now()
	res, err := s.cfg.Images.Import(r.Context(), src.img, ts, func(p image.Progress) {
		out.send(templateEvent{Type: "progress", Phase: p.Phase, Layer: p.Layer, Index: p.Index, Count: p.Count, Current: p.Current, Total: p.Total, Cached: p.Cached})
	})
	s.metrics.templateOp("import", started, err)
	if err != nil {
		return out.fail(imageError("import", err))
	}
	m := template.FromImage(res, source+"@"+res.Digest, useCmd)
	id, err := ts.PutManifest(m)
	var old string
	if err == nil {
		old, err = ts.Tag(name, id, by)
	}
	if err != nil {
		return out.fail(tagDenied(err))
	}
	if old != "" {
		st.detail["old_id"] = old
	}
	in, err := ts.Inspect(name)
	if err != nil {
		return out.fail(err)
	}
	in.Manifest = nil
	st.detail["id"] = id
	s.commitAudit(r, govern.AuditSuccess)
	return out.send(templateEvent{Type: "result", Template: &in})
}

type imageSource struct {
	img     v1.Image
	cleanup func()
}

// buildTemplate builds a Dockerfile. The body is the build context as a tar
// stream (gzip allowed); ?name= is the tag, ?dockerfile= the Dockerfile's
// path in the context (default "Dockerfile"), ?build_arg=K=V repeats,
// ?no_cache=true runs every step.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.templateStore()
	if err != nil {
		return err
	}
	if s.cfg.Builder == nil {
		return apierr.New(apierr.CodeUnavailable, "this daemon cannot build templates")
	}
	q := r.URL.Query()
	name := q.Get("name")
	if name == "" {
		return apierr.Validation("query parameter name is required")
	}
	if _, _, err := template.ParseName(name); err != nil {
		return err
	}
	st := stateOf(r)
	st.target = name
	by := templateActor(r)
	if err := ts.CheckTag(name, by); err != nil {
		return tagDenied(err)
	}
	dfPath := q.Get("dockerfile")
	if dfPath == "" {
		dfPath = "Dockerfile"
	}
	args := map[string]string{}
	for _, a := range q["build_arg"] {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return apierr.Validation("build_arg %q is not NAME=VALUE", a)
		}
		args[k] = v
	}
	var lim backend.Limits
	for key, dst := range map[string]*int64{"cpu_millis": &lim.CPUMillis, "memory_mb": &lim.MemoryBytes, "disk_mb": &lim.DiskBytes} {
		if v := q.Get(key); v != "" {
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil || n < 0 {
				return apierr.Validation("%s must be a non-negative integer", key)
			}
			*dst = n
		}
	}
	lim.MemoryBytes <<= 20
	lim.DiskBytes <<= 20
	// The RUN steps' network: ?network=none|open|allowlist, with
	// ?allow=host,host for an allowlist (ports 80 and 443).
	var netp *network.Policy
	if mode := q.Get("network"); mode != "" && mode != string(network.ModeNone) {
		p := network.Policy{Mode: network.Mode(mode)}
		for _, h := range strings.Split(q.Get("allow"), ",") {
			if h = strings.TrimSpace(h); h != "" {
				p.Allow = append(p.Allow, network.Rule{Host: h})
			}
		}
		if err := p.Validate(); err != nil {
			return apierr.Validation("network: %v", err)
		}
		netp = &p
		st.detail["network"] = mode
	}

	// Decided before the build context is read.
	if err := s.decide(r, &govern.Action{Template: &govern.Template{Name: name, Op: "build", Source: dfPath}}); err != nil {
		return err
	}
	dir, err := ts.TempDir("context-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	body, err := gunzipMaybe(r.Body)
	if err != nil {
		root.Close()
		return apierr.BadRequest("build context: %v", err)
	}
	_, err = files.Extract(r.Context(), root, body, files.Limits{MaxEntries: maxContextEntries, MaxBytes: maxContextBytes})
	root.Close()
	if err != nil {
		return apierr.BadRequest("build context: %v", err)
	}
	df, err := readContextFile(dir, dfPath)
	if err != nil {
		return apierr.Validation("dockerfile %q: %v", dfPath, err)
	}
	if err := s.checkFromRefs(ts, df, q.Get("insecure_registry") == "true"); err != nil {
		return err
	}
	out := startNDJSON(w)
	started := time.Now()
	res, err := s.cfg.Builder.Build(r.Context(), build.Request{
		Dockerfile: df, Context: dir, Name: name, Args: args, NoCache: q.Get("no_cache") == "true", Limits: lim,
		Registry: image.RegistryOptions{Insecure: q.Get("insecure_registry") == "true"},
		Network:  netp,
		By:       by,
	}, func(ev build.Event) {
		out.send(templateEvent{Type: ev.Type, Step: ev.Step, Steps: ev.Steps, Line: ev.Line, Text: ev.Text, Stream: ev.Stream})
	})
	s.metrics.templateOp("build", started, err)
	if err != nil {
		return out.fail(tagDenied(err))
	}
	st.detail["id"] = res.ID
	if res.OldID != "" {
		st.detail["old_id"] = res.OldID
	}
	st.detail["cache_hits"] = fmt.Sprint(res.CacheHits)
	s.commitAudit(r, govern.AuditSuccess)
	return out.send(templateEvent{Type: "result", Build: &res})
}

// gunzipMaybe returns r, decompressed if it starts with the gzip magic.
func gunzipMaybe(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if m, _ := br.Peek(2); len(m) == 2 && m[0] == 0x1f && m[1] == 0x8b {
		return gzip.NewReader(br)
	}
	return br, nil
}

// readContextFile reads a small file of the unpacked context without
// following symlinks out of it.
func readContextFile(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(filepath.Clean(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDockerfile+1))
	if err == nil && len(b) > maxDockerfile {
		err = errors.New("larger than 1 MiB")
	}
	return b, err
}
