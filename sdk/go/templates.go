package warden

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Template is a template known to the daemon.
type Template struct {
	Name     string            `json:"name"` // "name:tag"
	ID       string            `json:"id"`
	Source   string            `json:"source"`
	Created  time.Time         `json:"created"`
	Layers   int               `json:"layers"`
	Size     int64             `json:"size"`
	Builtin  bool              `json:"builtin,omitempty"`
	Owner    string            `json:"owner,omitempty"` // principal that may re-point or remove the tag; "" for a shared tag only admins change
	Manifest *TemplateManifest `json:"manifest,omitempty"`
}

// TemplateManifest is the immutable content of a template version.
type TemplateManifest struct {
	Layers  []TemplateLayer   `json:"layers"`
	Env     map[string]string `json:"env"`
	User    string            `json:"user"`
	Workdir string            `json:"workdir"`
	Start   *TemplateStart    `json:"start,omitempty"`
	Limits  *TemplateLimits   `json:"limits,omitempty"`
	Expose  []string          `json:"expose,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Source  string            `json:"source"`
	Created time.Time         `json:"created"`
}

// TemplateLimits are a template's resource defaults; zero fields take the
// daemon's.
type TemplateLimits struct {
	CPUMillis   int64 `json:"cpu_millis,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	DiskBytes   int64 `json:"disk_bytes,omitempty"`
}

// TemplateLayer is one layer of a template, stacked at Target.
type TemplateLayer struct {
	Target string `json:"target"`
	ID     string `json:"id"`
}

// TemplateStart is a template's start command and ready check.
type TemplateStart struct {
	Cmd   []string       `json:"cmd"`
	Ready *TemplateReady `json:"ready,omitempty"`
}

// TemplateReady is a readiness check: a command that exits 0 or a port that accepts
// connections.
type TemplateReady struct {
	Cmd        []string `json:"cmd,omitempty"`
	Port       int      `json:"port,omitempty"`
	TimeoutMS  int64    `json:"timeout_ms,omitempty"`
	IntervalMS int64    `json:"interval_ms,omitempty"`
}

// TemplateEvent is one line of a build or import stream.
type TemplateEvent struct {
	Type    string `json:"type"` // step, log, cached, progress, done, result, error
	Step    int    `json:"step,omitempty"`
	Steps   int    `json:"steps,omitempty"`
	Line    int    `json:"line,omitempty"`
	Text    string `json:"text,omitempty"`
	Stream  string `json:"stream,omitempty"`
	Phase   string `json:"phase,omitempty"` // progress: download, extract, done
	Layer   string `json:"layer,omitempty"`
	Index   int    `json:"index,omitempty"`
	Count   int    `json:"count,omitempty"`
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Cached  bool   `json:"cached,omitempty"`

	Template *Template    `json:"template,omitempty"` // result of an import
	Build    *BuildResult `json:"build,omitempty"`    // result of a build
	Code     string       `json:"code,omitempty"`     // error
	Message  string       `json:"message,omitempty"`  // error
}

// BuildResult describes a finished build.
type BuildResult struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	Steps     int      `json:"steps"`
	CacheHits int      `json:"cache_hits"`
	Executed  int      `json:"executed"`
	Layers    int      `json:"layers"`
	Warnings  []string `json:"warnings,omitempty"`
}

// BuildRequest describes a Dockerfile build; the context travels as a tar stream.
type BuildRequest struct {
	Name       string            // "name[:tag]"
	Dockerfile string            // path in the context; default "Dockerfile"
	Args       map[string]string // ARG values
	NoCache    bool
	CPUMillis  int64
	MemoryMB   int64
	DiskMB     int64
	// InsecureRegistry asks for plain HTTP for FROM images; the daemon honours
	// it only for registries its registries.allow lists with insecure: true.
	InsecureRegistry bool
	// Network of the RUN steps: "" or "none" (loopback only), "open", or "allowlist"
	// with Allow (host names, ports 80 and 443).
	Network string
	Allow   []string
}

// ImportRequest imports an image from a registry.
type ImportRequest struct {
	Name     string `json:"name"`
	Image    string `json:"image"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
	Insecure bool   `json:"insecure,omitempty"` // plain HTTP; only for registries the daemon allows it for
	Platform string `json:"platform,omitempty"` // default linux/amd64
	// Start makes the image's ENTRYPOINT and CMD the template's start command.
	Start bool `json:"start,omitempty"`
}

// ArchiveImport imports an uploaded image archive.
type ArchiveImport struct {
	Name     string
	Format   string // "docker-archive" (docker save) or "oci-archive" (a tar of an OCI layout); "" detects
	Tag      string // which image of a multi-image docker-save archive
	Platform string
	Start    bool
}

// TemplateUsage is the template store's disk use.
type TemplateUsage struct {
	Layers    int   `json:"layers"`
	Bytes     int64 `json:"bytes"`
	Reclaim   int64 `json:"reclaimable"`
	Templates []struct {
		Name   string `json:"name"`
		Bytes  int64  `json:"bytes"`
		Unique int64  `json:"unique"`
	} `json:"templates"`
}

// GCReport is what a template garbage collection removed.
type GCReport struct {
	Manifests  int   `json:"manifests_removed"`
	Layers     int   `json:"layers_removed"`
	CacheItems int   `json:"cache_entries_removed"`
	Bytes      int64 `json:"bytes_freed"`
	KeptLayers int   `json:"layers_kept"`
}

func templatePath(name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/v1/templates/" + strings.Join(segs, "/")
}

// ListTemplates lists every template, the built-in base first.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out struct {
		Templates []Template `json:"templates"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/templates", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out.Templates, nil
}

// GetTemplate returns one template with its manifest.
func (c *Client) GetTemplate(ctx context.Context, name string) (Template, error) {
	var t Template
	if err := c.do(ctx, &request{method: http.MethodGet, path: templatePath(name), idempotent: true}, &t); err != nil {
		return t, fmt.Errorf("get template %s: %w", name, err)
	}
	return t, nil
}

// DeleteTemplate removes a template's tag; its layers go at the next garbage collection.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: templatePath(name), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete template %s: %w", name, err)
	}
	return nil
}

// TemplateDiskUsage reports the template store's disk use.
func (c *Client) TemplateDiskUsage(ctx context.Context) (TemplateUsage, error) {
	var u TemplateUsage
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/template-store/usage", idempotent: true}, &u); err != nil {
		return u, fmt.Errorf("template disk usage: %w", err)
	}
	return u, nil
}

// GCTemplates removes layers and template versions nothing uses.
func (c *Client) GCTemplates(ctx context.Context) (GCReport, error) {
	var r GCReport
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/template-store/gc", idempotent: true}, &r); err != nil {
		return r, fmt.Errorf("template gc: %w", err)
	}
	return r, nil
}

// BuildTemplate builds a Dockerfile from the build context tar stream ctxTar (gzip
// allowed), calling progress for each event, and returns the result.
func (c *Client) BuildTemplate(ctx context.Context, req BuildRequest, ctxTar io.Reader, progress func(TemplateEvent)) (BuildResult, error) {
	q := url.Values{"name": {req.Name}}
	if req.Dockerfile != "" {
		q.Set("dockerfile", req.Dockerfile)
	}
	for k, v := range req.Args {
		q.Add("build_arg", k+"="+v)
	}
	if req.NoCache {
		q.Set("no_cache", "true")
	}
	if req.InsecureRegistry {
		q.Set("insecure_registry", "true")
	}
	if req.Network != "" {
		q.Set("network", req.Network)
	}
	if len(req.Allow) > 0 {
		q.Set("allow", strings.Join(req.Allow, ","))
	}
	for k, v := range map[string]int64{"cpu_millis": req.CPUMillis, "memory_mb": req.MemoryMB, "disk_mb": req.DiskMB} {
		if v != 0 {
			q.Set(k, fmt.Sprint(v))
		}
	}
	ev, err := c.templateStream(ctx, &request{method: http.MethodPost, path: "/v1/templates/build", query: q,
		body: ctxTar, contentType: "application/x-tar", accept: "application/x-ndjson"}, progress)
	if err != nil {
		return BuildResult{}, fmt.Errorf("build template %s: %w", req.Name, err)
	}
	if ev.Build == nil {
		return BuildResult{}, fmt.Errorf("build template %s: stream ended without a result", req.Name)
	}
	return *ev.Build, nil
}

// ImportTemplate imports an image from a registry.
func (c *Client) ImportTemplate(ctx context.Context, req ImportRequest, progress func(TemplateEvent)) (Template, error) {
	ev, err := c.templateStream(ctx, &request{method: http.MethodPost, path: "/v1/templates/import", json: req, accept: "application/x-ndjson"}, progress)
	if err != nil {
		return Template{}, fmt.Errorf("import %s: %w", req.Image, err)
	}
	return *ev.Template, nil
}

// ImportArchive imports an image archive (docker save output, or a tar of an OCI image
// layout) read from r.
func (c *Client) ImportArchive(ctx context.Context, req ArchiveImport, r io.Reader, progress func(TemplateEvent)) (Template, error) {
	q := url.Values{"name": {req.Name}}
	for k, v := range map[string]string{"format": req.Format, "tag": req.Tag, "platform": req.Platform} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.Start {
		q.Set("start", "true")
	}
	ev, err := c.templateStream(ctx, &request{method: http.MethodPost, path: "/v1/templates/import", query: q,
		body: r, contentType: "application/x-tar", accept: "application/x-ndjson"}, progress)
	if err != nil {
		return Template{}, fmt.Errorf("import archive as %s: %w", req.Name, err)
	}
	return *ev.Template, nil
}

// templateStream reads a build or import stream to its result event.
func (c *Client) templateStream(ctx context.Context, rq *request, progress func(TemplateEvent)) (TemplateEvent, error) {
	resp, err := c.send(ctx, rq)
	if err != nil {
		return TemplateEvent{}, err
	}
	d := newLineDecoder(resp.Body, c.maxEvent)
	defer d.close()
	for {
		var ev TemplateEvent
		if err := d.next(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return TemplateEvent{}, errors.New("stream ended without a result")
			}
			return TemplateEvent{}, err
		}
		switch ev.Type {
		case "error":
			return TemplateEvent{}, &Error{Code: ev.Code, Message: ev.Message}
		case "result":
			if ev.Template == nil && ev.Build == nil {
				return TemplateEvent{}, errors.New("result event without a result")
			}
			return ev, nil
		}
		if progress != nil {
			progress(ev)
		}
	}
}
