package integration

// Issue 15, item 1: image references that name host-local services (SSRF
// from the daemon). wardend refuses registries on internal addresses unless
// registries.allow lists them, checks every redirect and every connection,
// speaks plain HTTP only to registries allowed with insecure: true, and never
// quotes a registry's response in its errors.

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// daemonConfig writes a wardend config file and returns the flags that
// select it.
func daemonConfig(t *testing.T, body string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wardend.yaml")
	if err := os.WriteFile(p, []byte("version: 1\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", p}
}

// allowRegistries returns the flags of a config that allows hosts as
// registries over plain HTTP.
func allowRegistries(t *testing.T, hosts ...string) []string {
	t.Helper()
	var b strings.Builder
	b.WriteString("registries:\n  allow:\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "    - host: %q\n      insecure: true\n", h)
	}
	return daemonConfig(t, b.String())
}

const ssrfSecret = "INTERNAL-SERVICE-SECRET-7d41"

// internalService is a host-local HTTP service an attacker wants wardend to
// call: it counts requests and answers every one with a secret (as a 401
// with a registry-style error, so a registry client would quote it).
func internalService(t *testing.T) (host string, hits *atomic.Int64) {
	t.Helper()
	hits = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"errors":[{"code":"UNAUTHORIZED","message":%q}]}`, ssrfSecret)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), hits
}

// apiCall sends a request with the admin key and returns the status and body.
func apiCall(t *testing.T, d *daemon, method, path, ctype string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, d.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// wantRefused checks a plain (not streamed) JSON error: a 4xx with code,
// no secret.
func wantRefused(t *testing.T, status int, body []byte, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || status < 400 || status >= 500 || e.Error.Code != code {
		t.Fatalf("status %d, body %s: want a 4xx JSON error %s", status, body, code)
	}
	if bytes.Contains(body, []byte(ssrfSecret)) {
		t.Errorf("the response quotes the internal service: %s", body)
	}
	if !strings.Contains(e.Error.Message, "not allowed") {
		t.Errorf("unclear message: %q", e.Error.Message)
	}
	t.Logf("%d %s", status, body)
}

// contextTar is a build context holding only a Dockerfile.
func contextTar(t *testing.T, dockerfile string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg})
	io.WriteString(tw, dockerfile)
	tw.Close()
	return &buf
}

func importJSON(ref string, insecure bool) io.Reader {
	b, _ := json.Marshal(map[string]any{"name": "ssrf:1", "image": ref, "insecure": insecure})
	return bytes.NewReader(b)
}

func TestSecRegistrySSRF(t *testing.T) {
	internal, hits := internalService(t)
	_, internalPort, _ := net.SplitHostPort(internal)

	// An allowed registry (explicitly, in the config) that redirects some
	// requests to the internal service.
	var redirects atomic.Int64
	allowed := httptest.NewServer(http.HandlerFunc(func() http.HandlerFunc {
		reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && (strings.HasPrefix(r.URL.Path, "/v2/redir/app/manifests/") ||
				strings.HasPrefix(r.URL.Path, "/v2/blobredir/app/blobs/")) {
				redirects.Add(1)
				http.Redirect(w, r, "http://"+internal+"/steal", http.StatusTemporaryRedirect)
				return
			}
			// Over HTTPS, so that the address, not the scheme, is what
			// gets it refused.
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v2/redirtls/app/manifests/") {
				redirects.Add(1)
				http.Redirect(w, r, "https://"+internal+"/steal", http.StatusTemporaryRedirect)
				return
			}
			reg.ServeHTTP(w, r)
		}
	}()))
	defer allowed.Close()
	allowedHost := strings.TrimPrefix(allowed.URL, "http://")
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"ok/app:v1", "redir/app:v1", "redirtls/app:v1", "blobredir/app:v1"} {
		ref, err := name.ParseReference(allowedHost+"/"+repo, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	redirects.Store(0)

	state, run := newDirs(t)
	d := startDaemon(t, state, run, allowRegistries(t, allowedHost)...)
	c := d.client(t, d.adminKey)

	t.Run("ImportInternal", func(t *testing.T) {
		for _, ref := range []string{internal + "/x:y", "localhost:" + internalPort + "/x:y", "[::1]:" + internalPort + "/x:y"} {
			for _, insecure := range []bool{false, true} {
				status, body := apiCall(t, d, "POST", "/v1/templates/import", "application/json", importJSON(ref, insecure))
				wantRefused(t, status, body, "forbidden")
			}
		}
	})
	t.Run("BuildFromInternal", func(t *testing.T) {
		status, body := apiCall(t, d, "POST", "/v1/templates/build?name=ssrf-build", "application/x-tar",
			contextTar(t, "FROM "+internal+"/x:y\n"))
		wantRefused(t, status, body, "forbidden")
		status, body = apiCall(t, d, "POST", "/v1/templates/build?name=ssrf-build&insecure_registry=true", "application/x-tar",
			contextTar(t, "FROM "+internal+"/x:y\n"))
		wantRefused(t, status, body, "forbidden")
		// A variable hides the registry until the build runs: the pull
		// is refused then, inside the build's stream.
		_, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "ssrf-build"},
			contextTar(t, "ARG REG="+internal+"\nFROM ${REG}/x:y\n"), nil)
		var we *warden.Error
		if !errors.As(err, &we) || we.Code != "forbidden" || !strings.Contains(we.Message, "not allowed") || strings.Contains(we.Message, ssrfSecret) {
			t.Fatalf("build with FROM ${REG}: %v", err)
		}
		t.Log(err)
	})
	t.Run("RedirectFromAllowedRegistry", func(t *testing.T) {
		// The manifest redirect is followed while opening the image,
		// before the import streams: a plain 403.
		status, body := apiCall(t, d, "POST", "/v1/templates/import", "application/json", importJSON(allowedHost+"/redir/app:v1", false))
		wantRefused(t, status, body, "forbidden")
		status, body = apiCall(t, d, "POST", "/v1/templates/import", "application/json", importJSON(allowedHost+"/redirtls/app:v1", false))
		wantRefused(t, status, body, "forbidden")
		if !bytes.Contains(body, []byte("loopback")) {
			t.Errorf("the HTTPS redirect was not refused for its address: %s", body)
		}
		// Blob redirects come while the import streams its progress: the
		// stream's error event carries the code.
		_, err := c.ImportTemplate(ctxT(t), warden.ImportRequest{Name: "ssrf:blob", Image: allowedHost + "/blobredir/app:v1"}, nil)
		var we *warden.Error
		if !errors.As(err, &we) || we.Code != "forbidden" || strings.Contains(we.Message, ssrfSecret) {
			t.Fatalf("import with a blob redirect: %v", err)
		}
		t.Log(err)
		if redirects.Load() < 3 {
			t.Errorf("the allowed registry redirected %d times, want every redirect exercised", redirects.Load())
		}
	})
	t.Run("AllowedRegistryImports", func(t *testing.T) {
		tm, err := c.ImportTemplate(ctxT(t), warden.ImportRequest{Name: "ssrf:ok", Image: allowedHost + "/ok/app:v1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Layers != 1 {
			t.Errorf("imported %d layers, want 1", tm.Layers)
		}
	})
	if n := hits.Load(); n != 0 {
		t.Errorf("the internal service got %d requests from wardend", n)
	}
}
