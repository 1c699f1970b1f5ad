package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultPlatform is the platform picked from multi-platform images when
// none is given.
const DefaultPlatform = "linux/amd64"

// Kinds of on-disk image sources reported by [Detect].
const (
	KindOCILayout     = "oci-layout"     // OCI image layout directory
	KindDockerArchive = "docker-archive" // "docker save" tarball
	KindOCIArchive    = "oci-archive"    // OCI image layout packed in a tar file
)

// RegistryOptions configure [FromRegistry].
type RegistryOptions struct {
	// Username and Password select HTTP basic authentication.
	Username, Password string
	// Token selects bearer token authentication. It cannot be combined
	// with Username.
	Token string
	// Insecure asks for plain HTTP. It is honoured only for registries
	// the [Policy] lists with Insecure (which get plain HTTP whether or
	// not it is set); for any other registry the pull is refused. TLS
	// certificates are always verified when a registry speaks HTTPS.
	Insecure bool
	// Platform picks the image from a multi-platform index, as
	// "os/arch[/variant]". Empty means [DefaultPlatform].
	Platform string
}

func parsePlatform(s string) (*v1.Platform, error) {
	if s == "" {
		s = DefaultPlatform
	}
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return nil, fmt.Errorf("parse platform %q: %w", s, err)
	}
	if p.OS == "" || p.Architecture == "" {
		return nil, fmt.Errorf("parse platform %q: want os/arch[/variant]", s)
	}
	return p, nil
}

// FromRegistry resolves ref (e.g. "docker.io/library/alpine:3.20" or
// "registry.example.com/app@sha256:...") in a registry and returns the image
// for opts.Platform, under the default [Policy] (see [Policy.FromRegistry]).
func FromRegistry(ctx context.Context, ref string, opts RegistryOptions) (v1.Image, error) {
	return (*Policy)(nil).FromRegistry(ctx, ref, opts)
}

// FromRegistry resolves ref (e.g. "docker.io/library/alpine:3.20" or
// "registry.example.com/app@sha256:...") in a registry and returns the image
// for opts.Platform.
//
// Every request goes through p's destination policy: a registry on an
// internal address that registries.allow does not list is refused with an
// error wrapping [ErrRegistryDenied] before anything is sent, and so are
// redirects and token realms pointing at one. Plain HTTP is used for the
// registries listed with Insecure, and only for them: opts.Insecure for any
// other registry is refused. Errors name the HTTP status a registry answered
// with, never its response body.
//
// Only the manifest and config are fetched now; layers are downloaded when
// read. ctx governs those later downloads too, so it must stay live until the
// image has been imported.
func (p *Policy) FromRegistry(ctx context.Context, ref string, opts RegistryOptions) (v1.Image, error) {
	p = p.orDefault()
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("parse image reference %q: %w", ref, err)
	}
	if err := p.CheckReference(r, opts.Insecure); err != nil {
		return nil, fmt.Errorf("fetch image %s: %w", r, err)
	}
	regHost := r.Context().RegistryStr()
	host, port := splitRegistryHost(regHost)
	if reg, ok := p.allowed(host, port); ok && reg.Insecure {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, fmt.Errorf("parse image reference %q: %w", ref, err)
		}
	}
	plat, err := parsePlatform(opts.Platform)
	if err != nil {
		return nil, err
	}
	var auth authn.Authenticator
	switch {
	case opts.Username != "" && opts.Token != "":
		return nil, errors.New("registry credentials: set either username/password or token, not both")
	case opts.Username != "":
		auth = &authn.Basic{Username: opts.Username, Password: opts.Password}
	case opts.Token != "":
		auth = &authn.Bearer{Token: opts.Token}
	default:
		auth = authn.Anonymous
	}
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithPlatform(*plat),
		remote.WithUserAgent("warden"),
		remote.WithTransport(&guard{p: p, base: p.transport()}),
	}
	img, err := remote.Image(r, ropts...)
	if err != nil {
		var de *DeniedError
		var terr *transport.Error
		if !errors.As(err, &de) && !errors.As(err, &terr) {
			if list := remotePlatforms(r, ropts); list != "" {
				err = fmt.Errorf("%w; available platforms: %s", err, list)
			}
		}
		return nil, fmt.Errorf("fetch image %s: %w", r, registryError(r, auth, err))
	}
	return &registryImage{Image: img, ref: r, auth: auth}, nil
}

// CheckReference refuses, before any request, a pull of r that p would
// refuse by the registry's name alone: an address literal (or localhost)
// in a refused range that registries.allow does not list, or plain HTTP
// (insecure) for a registry not listed with insecure. Registries named by
// DNS names are checked again by address when connecting.
func (p *Policy) CheckReference(r name.Reference, insecure bool) error {
	p = p.orDefault()
	regHost := r.Context().RegistryStr()
	host, port := splitRegistryHost(regHost)
	reg, ok := p.allowed(host, port)
	if !ok {
		if why := p.denyHost(host); why != "" {
			return &DeniedError{Host: regHost, Reason: why}
		}
	}
	if insecure && (!ok || !reg.Insecure) {
		return &DeniedError{Host: regHost, Reason: "insecure (plain HTTP) is honoured only for registries listed in registries.allow with insecure: true"}
	}
	return nil
}

// splitRegistryHost splits a registry's "host[:port]" ("[v6]:port" for
// IPv6), port "" when absent.
func splitRegistryHost(s string) (host, port string) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		return h, p
	}
	return strings.Trim(s, "[]"), ""
}

// remotePlatforms lists the platforms of r if it is an index, for errors.
func remotePlatforms(r name.Reference, ropts []remote.Option) string {
	idx, err := remote.Index(r, ropts...)
	if err != nil {
		return ""
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return ""
	}
	var list []string
	for _, d := range im.Manifests {
		if d.Platform != nil {
			list = append(list, d.Platform.String())
		}
	}
	return strings.Join(list, ", ")
}

// layoutCandidate is an image manifest found in an OCI layout.
type layoutCandidate struct {
	desc     v1.Descriptor
	index    v1.ImageIndex
	platform *v1.Platform
}

func (c layoutCandidate) String() string {
	p := "unknown platform"
	if c.platform != nil {
		p = c.platform.String()
	}
	s := fmt.Sprintf("%s (%s)", p, c.desc.Digest)
	if n := c.desc.Annotations["org.opencontainers.image.ref.name"]; n != "" {
		s += " ref " + n
	}
	return s
}

const maxIndexDepth = 8

func collectManifests(idx v1.ImageIndex, depth int, seen map[v1.Hash]bool, out *[]layoutCandidate) error {
	if depth > maxIndexDepth {
		return fmt.Errorf("image indexes nested deeper than %d levels", maxIndexDepth)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("read image index: %w", err)
	}
	for _, desc := range im.Manifests {
		switch {
		case desc.MediaType.IsIndex():
			child, err := idx.ImageIndex(desc.Digest)
			if err != nil {
				return fmt.Errorf("read image index %s: %w", desc.Digest, err)
			}
			if err := collectManifests(child, depth+1, seen, out); err != nil {
				return err
			}
		case desc.MediaType.IsImage():
			if seen[desc.Digest] {
				continue
			}
			seen[desc.Digest] = true
			*out = append(*out, layoutCandidate{desc: desc, index: idx, platform: desc.Platform})
		}
	}
	return nil
}

// FromLayout opens the image for platform (default [DefaultPlatform]) in the
// OCI image layout directory dir, descending into nested indexes. A layout
// holding exactly one image manifest yields that image whatever its platform.
func FromLayout(dir string, platform string) (v1.Image, error) {
	want, err := parsePlatform(platform)
	if err != nil {
		return nil, err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open oci layout %s: %w", dir, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("open oci layout %s: %w", dir, err)
	}
	var cands []layoutCandidate
	if err := collectManifests(idx, 0, map[v1.Hash]bool{}, &cands); err != nil {
		return nil, fmt.Errorf("oci layout %s: %w", dir, err)
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("oci layout %s holds no image manifests", dir)
	}
	open := func(c layoutCandidate) (v1.Image, error) {
		img, err := c.index.Image(c.desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("oci layout %s: open image %s: %w", dir, c.desc.Digest, err)
		}
		return img, nil
	}
	if len(cands) == 1 {
		return open(cands[0])
	}
	var matches []layoutCandidate
	for i, c := range cands {
		if c.platform == nil {
			// No platform in the descriptor: ask the image config.
			if img, err := c.index.Image(c.desc.Digest); err == nil {
				if cf, err := img.ConfigFile(); err == nil {
					cands[i].platform = cf.Platform()
					c = cands[i]
				}
			}
		}
		if c.platform != nil && c.platform.Satisfies(*want) {
			matches = append(matches, c)
		}
	}
	list := func(cs []layoutCandidate) string {
		s := make([]string, len(cs))
		for i, c := range cs {
			s[i] = c.String()
		}
		return strings.Join(s, ", ")
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("oci layout %s has no image for platform %s; available: %s", dir, want, list(cands))
	case 1:
		return open(matches[0])
	default:
		return nil, fmt.Errorf("oci layout %s has %d images for platform %s: %s", dir, len(matches), want, list(matches))
	}
}

// FromDockerArchive opens an image from a "docker save" tarball. tag selects
// the image (e.g. "alpine:3.20") and may be empty when the archive holds a
// single image.
func FromDockerArchive(p string, tag string) (v1.Image, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		return nil, fmt.Errorf("read docker archive %s: %w", p, err)
	}
	tags := func() string {
		var all []string
		for _, d := range m {
			if len(d.RepoTags) == 0 {
				all = append(all, "<untagged "+d.Config+">")
			}
			all = append(all, d.RepoTags...)
		}
		return strings.Join(all, ", ")
	}
	if tag == "" {
		switch len(m) {
		case 0:
			return nil, fmt.Errorf("docker archive %s holds no images", p)
		case 1:
		default:
			return nil, fmt.Errorf("docker archive %s holds %d images, pick one by tag: %s", p, len(m), tags())
		}
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return nil, fmt.Errorf("open docker archive %s: %w", p, err)
		}
		return img, nil
	}
	t, err := name.NewTag(tag)
	if err != nil {
		return nil, fmt.Errorf("parse tag %q: %w", tag, err)
	}
	found := false
	for _, d := range m {
		for _, rt := range d.RepoTags {
			if x, err := name.NewTag(rt); err == nil && x.Name() == t.Name() {
				found = true
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("docker archive %s has no image tagged %s; available: %s", p, tag, tags())
	}
	img, err := tarball.ImageFromPath(p, &t)
	if err != nil {
		return nil, fmt.Errorf("open docker archive %s: %w", p, err)
	}
	return img, nil
}

// Detect reports what kind of image source p is: [KindOCILayout] for a
// directory with an "oci-layout" file, [KindDockerArchive] for a tar file
// with a top-level "manifest.json" (Docker 25+ archives, which also carry an
// OCI layout, count as this), and [KindOCIArchive] for a tar file with a
// top-level "oci-layout".
func Detect(p string) (kind string, err error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("detect image source: %w", err)
	}
	if fi.IsDir() {
		lfi, err := os.Stat(filepath.Join(p, "oci-layout"))
		if err == nil && lfi.Mode().IsRegular() {
			return KindOCILayout, nil
		}
		return "", fmt.Errorf("directory %s is not an oci image layout (no oci-layout file)", p)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is neither a directory nor a regular file", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("detect image source: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(4); bytes.HasPrefix(magic, []byte{0x1f, 0x8b}) || bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		return "", fmt.Errorf("%s is a compressed file; decompress it to a plain tar first", p)
	}
	tr := tar.NewReader(br)
	var hasManifest, hasLayout bool
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if i == 0 {
				return "", fmt.Errorf("%s is not a tar archive: %w", p, err)
			}
			return "", fmt.Errorf("read archive %s: %w", p, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		switch path.Clean(strings.TrimLeft(hdr.Name, "/")) {
		case "manifest.json":
			hasManifest = true
		case "oci-layout":
			hasLayout = true
		}
	}
	switch {
	case hasManifest:
		return KindDockerArchive, nil
	case hasLayout:
		return KindOCIArchive, nil
	}
	return "", fmt.Errorf("archive %s has neither manifest.json (docker save) nor oci-layout (oci archive)", p)
}

// FromOCIArchive opens the image for platform from a tar file holding an OCI
// image layout. The layout is unpacked into a temporary directory that
// cleanup removes; call it once the image is no longer used (after [Import]).
func FromOCIArchive(p string, platform string) (img v1.Image, cleanup func(), err error) {
	tmp, err := os.MkdirTemp("", "warden-oci-archive-")
	if err != nil {
		return nil, nil, fmt.Errorf("unpack oci archive: %w", err)
	}
	cleanup = func() { os.RemoveAll(tmp) }
	if err := unpackOCIArchive(p, tmp); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("unpack oci archive %s: %w", p, err)
	}
	img, err = FromLayout(tmp, platform)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return img, cleanup, nil
}

// unpackOCIArchive extracts the OCI layout parts of the (untrusted) tar
// file p into dir: "oci-layout", "index.json" and regular files and
// directories under "blobs/". Everything else, links included, is ignored.
// Writes go through an [os.Root], so nothing can land outside dir.
func unpackOCIArchive(p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		rel, err := cleanName(hdr.Name)
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		if rel != "oci-layout" && rel != "index.json" && rel != "blobs" && !strings.HasPrefix(rel, "blobs/") {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(rel, 0o755); err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			if d := path.Dir(rel); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("entry %q: %w", hdr.Name, err)
				}
			}
			if err := root.Remove(rel); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
			out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
		}
	}
}

// Open opens the image at p, a path of any kind [Detect] recognises. tag is
// used for docker archives, platform for OCI layouts and archives. cleanup
// releases temporary files; call it once the image is no longer used. On
// error cleanup is nil.
func Open(p, platform, tag string) (img v1.Image, cleanup func(), err error) {
	kind, err := Detect(p)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case KindOCILayout:
		img, err = FromLayout(p, platform)
	case KindDockerArchive:
		img, err = FromDockerArchive(p, tag)
	case KindOCIArchive:
		return FromOCIArchive(p, platform)
	default:
		return nil, nil, fmt.Errorf("unsupported image source kind %q", kind)
	}
	if err != nil {
		return nil, nil, err
	}
	return img, func() {}, nil
}
