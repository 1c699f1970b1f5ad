package integration

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// symlinkContext is a build context tar holding files and symlinks.
func symlinkContext(t *testing.T, files, links map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	for name, target := range links {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestSecCopyGlobSymlink (issue 15, item 2): a COPY or ADD glob through a
// symlink in the context that leads to a host directory finds nothing, the
// same whether or not the host path exists, and the error names no host
// file. Globs through links that stay in the context still work.
func TestSecCopyGlobSymlink(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)

	build := func(dockerfile, link string) error {
		t.Helper()
		tarball := symlinkContext(t, map[string]string{"Dockerfile": dockerfile, "sub/c.txt": "c\n"},
			map[string]string{"link": link, "sub/deeper": link, "in": "sub"})
		_, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "globbed"}, tarball, nil)
		return err
	}
	const missing = "/nonexistent-warden-sec-glob"
	for _, src := range []string{
		"link/pass*", "link/passw?", "link/[p]asswd", "link/host*", "link/*/x", "link/*", "*/passwd", "*/pass*",
		"sub/deeper/pass*", "link/passwd", "sub/*/passwd",
	} {
		for _, cmd := range []string{"COPY", "ADD"} {
			df := "FROM base\n" + cmd + " " + src + " /x/\n"
			onHost := build(df, "/etc")
			absent := build(df, missing)
			var we *warden.Error
			if !errors.As(onHost, &we) || !strings.Contains(we.Message, "Dockerfile:2") {
				t.Errorf("%s %s through a link to /etc: %v, want a build error naming Dockerfile:2", cmd, src, onHost)
				continue
			}
			if onHost.Error() != absent.Error() {
				t.Errorf("%s %s: the answer depends on whether the host path exists:\n  /etc:    %v\n  missing: %v", cmd, src, onHost, absent)
			}
			for _, host := range []string{"passwd", "hostname", "hosts", "/etc", "escapes"} {
				if strings.Contains(we.Message, host) && !strings.Contains(src, host) {
					t.Errorf("%s %s: the error names a host file or path (%q): %v", cmd, src, host, onHost)
				}
			}
		}
	}

	// The Dockerfile itself named through such a link: same answer too.
	var answers []string
	for _, link := range []string{"/etc", missing} {
		tarball := symlinkContext(t, map[string]string{"Dockerfile": "FROM base\n"}, map[string]string{"link": link})
		_, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "globbed", Dockerfile: "link/passwd"}, tarball, nil)
		var we *warden.Error
		if !errors.As(err, &we) {
			t.Fatalf("a Dockerfile read through a link to %s: %v, want an API error", link, err)
		}
		answers = append(answers, we.Code+": "+we.Message) // not the request id
	}
	if answers[0] != answers[1] {
		t.Errorf("?dockerfile= through a link: the answer depends on whether the host path exists:\n  /etc:    %s\n  missing: %s", answers[0], answers[1])
	}

	// A glob through a link that stays in the context matches as before.
	df := "FROM base\nCOPY in/*.txt /x/\nRUN test \"$(cat /x/c.txt)\" = c\n"
	if err := build(df, "/etc"); err != nil {
		t.Errorf("a glob through a link inside the context: %v", err)
	}
}
