package api

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/image"
	"github.com/warden-sandbox/warden/internal/template"
	"github.com/warden-sandbox/warden/internal/template/dockerfile"
)

// imageError is the API error of an image pull or import: apierr.From's
// 403 for a registry the destination policy refuses and 413 for an import
// limit, 422 otherwise. Registry errors never quote a registry's response
// (see image.Policy), so the message is safe to show.
func imageError(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	if errors.Is(err, image.ErrRegistryDenied) || errors.Is(err, image.ErrLimit) {
		return apierr.From(err)
	}
	return apierr.Wrap(apierr.CodeValidationFailed, err.Error(), err)
}

// checkFromRefs refuses, before a build starts streaming, a Dockerfile
// whose FROM names a registry the image policy refuses by name (an
// internal address literal or localhost, or insecure for a registry not
// allowed plain HTTP). FROM lines with variables, and registries named by
// DNS names, are checked when the build pulls them; a Dockerfile that does
// not parse is left for the build to report.
func (s *Server) checkFromRefs(ts *template.Store, df []byte, insecure bool) error {
	f, err := dockerfile.Parse(bytes.NewReader(df))
	if err != nil {
		return nil
	}
	for _, in := range f.Instructions {
		if in.From == nil {
			continue
		}
		ref := in.From.Image
		if strings.Contains(ref, "$") || ref == "scratch" || ref == template.BaseName || ref == template.BaseName+":latest" {
			continue
		}
		if _, err := ts.Resolve(ref); err == nil {
			continue
		}
		r, err := name.ParseReference(ref)
		if err != nil {
			continue
		}
		if err := s.cfg.Images.CheckReference(r, insecure); err != nil {
			return imageError("FROM "+ref, err)
		}
	}
	return nil
}
