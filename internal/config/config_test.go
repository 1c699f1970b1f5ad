package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	return Load(args, func(k string) string { return env[k] }, flag.NewFlagSet("wardend", flag.ContinueOnError))
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "w.yaml")
	os.WriteFile(file, []byte("version: 1\nlisten: 127.0.0.1:1111\nstate_dir: /from/file\nmax_timeout: 2h\n"), 0o600)
	c, err := load(t, []string{"--config", file, "--listen", "127.0.0.1:3333"}, map[string]string{"WARDEN_LISTEN": "127.0.0.1:2222", "WARDEN_STATE_DIR": "/from/env"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:3333" || c.StateDir != "/from/env" || c.MaxTimeout != 2*time.Hour {
		t.Fatalf("precedence wrong: %+v", c)
	}
	c, err = load(t, []string{"--listen", ""}, nil)
	if err != nil || c.Listen != "" {
		t.Fatalf("--listen \"\" should disable TCP: %q %v", c.Listen, err)
	}
}

func TestRejects(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		file string
		args []string
		want string
	}{
		"unknown field":   {file: "version: 1\nlisen: x\n", want: "lisen"},
		"bad version":     {file: "version: 9\n", want: "version 9"},
		"bad listen":      {args: []string{"--listen", "nope"}, want: "listen"},
		"bad landlock":    {args: []string{"--landlock", "maybe"}, want: "landlock"},
		"bad log level":   {args: []string{"--log-level", "loud"}, want: "log_level"},
		"no endpoints":    {args: []string{"--listen", "", "--socket", ""}, want: "unreachable"},
		"stray argument":  {args: []string{"serve"}, want: "unexpected argument"},
		"bad max timeout": {file: "version: 1\nmax_timeout: 1s\n", want: "default_timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
				os.WriteFile(p, []byte(tc.file), 0o600)
				args = append([]string{"--config", p}, args...)
			}
			_, err := load(t, args, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestE2BListen(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil || c.E2BListen != "127.0.0.1:3000" {
		t.Fatalf("default e2b_listen = %q, %v; want 127.0.0.1:3000", c.E2BListen, err)
	}
	dir := t.TempDir()
	off := filepath.Join(dir, "off.yaml")
	os.WriteFile(off, []byte("version: 1\ne2b_listen: \"\"\n"), 0o600)
	if c, err = load(t, []string{"--config", off}, nil); err != nil || c.E2BListen != "" {
		t.Fatalf("e2b_listen: \"\" in the file should disable it: %q, %v", c.E2BListen, err)
	}
	file := filepath.Join(dir, "w.yaml")
	os.WriteFile(file, []byte("version: 1\ne2b_listen: 127.0.0.1:3000\n"), 0o600)
	c, err = load(t, []string{"--config", file}, nil)
	if err != nil || c.E2BListen != "127.0.0.1:3000" {
		t.Fatalf("file: e2b_listen = %q, %v", c.E2BListen, err)
	}
	c, err = load(t, []string{"--config", file}, map[string]string{"WARDEN_E2B_LISTEN": "127.0.0.1:3001"})
	if err != nil || c.E2BListen != "127.0.0.1:3001" {
		t.Fatalf("env: e2b_listen = %q, %v", c.E2BListen, err)
	}
	c, err = load(t, []string{"--config", file, "--e2b-listen", "127.0.0.1:3002"}, map[string]string{"WARDEN_E2B_LISTEN": "127.0.0.1:3001"})
	if err != nil || c.E2BListen != "127.0.0.1:3002" {
		t.Fatalf("flag: e2b_listen = %q, %v", c.E2BListen, err)
	}
	c, err = load(t, []string{"--config", file, "--e2b-listen", ""}, nil)
	if err != nil || c.E2BListen != "" {
		t.Fatalf("--e2b-listen \"\" should disable it: %q, %v", c.E2BListen, err)
	}
	for _, bad := range []string{"nope", "127.0.0.1:7070"} {
		if _, err := load(t, []string{"--e2b-listen", bad}, nil); err == nil || !strings.Contains(err.Error(), "e2b_listen") {
			t.Errorf("--e2b-listen %q: error = %v, want it to mention e2b_listen", bad, err)
		}
	}
}

func TestPreviewDomain(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil || c.PreviewDomain != "" {
		t.Fatalf("default preview_domain = %q, %v; want off", c.PreviewDomain, err)
	}
	file := filepath.Join(t.TempDir(), "w.yaml")
	os.WriteFile(file, []byte("version: 1\npreview_domain: preview.example.com\n"), 0o600)
	c, err = load(t, []string{"--config", file}, nil)
	if err != nil || c.PreviewDomain != "preview.example.com" {
		t.Fatalf("file: preview_domain = %q, %v", c.PreviewDomain, err)
	}
	c, err = load(t, []string{"--config", file}, map[string]string{"WARDEN_PREVIEW_DOMAIN": "env.example.com"})
	if err != nil || c.PreviewDomain != "env.example.com" {
		t.Fatalf("env: preview_domain = %q, %v", c.PreviewDomain, err)
	}
	c, err = load(t, []string{"--config", file, "--preview-domain", "flag.example.com"}, map[string]string{"WARDEN_PREVIEW_DOMAIN": "env.example.com"})
	if err != nil || c.PreviewDomain != "flag.example.com" {
		t.Fatalf("flag: preview_domain = %q, %v", c.PreviewDomain, err)
	}
	for _, bad := range []string{"https://x.example.com", "x.example.com:8080", ".example.com", "nodot"} {
		if _, err := load(t, []string{"--preview-domain", bad}, nil); err == nil || !strings.Contains(err.Error(), "preview_domain") {
			t.Errorf("--preview-domain %q: error = %v, want it to mention preview_domain", bad, err)
		}
	}
}

func TestLimitsAndMetrics(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits; l.MaxConns != 1024 || l.MaxConnsPerIP != 64 || l.BodyTimeout != 30*time.Second || l.BodyMinRate != 1024 ||
		l.StreamBodyTimeout != 5*time.Minute || l.PreviewWebSocketsPerPort != 256 || l.PreviewWebSocketsPerClient != 32 {
		t.Fatalf("default limits: %+v", l)
	}
	if c.Metrics.PerSandboxLabels || c.Metrics.Listen != "" {
		t.Fatalf("default metrics: %+v", c.Metrics)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "w.yaml")
	os.WriteFile(file, []byte("version: 1\nlimits:\n  max_conns_per_ip: 8\n  body_timeout: 2s\nmetrics:\n  per_sandbox_labels: true\n"), 0o600)
	c, err = load(t, []string{"--config", file, "--metrics-listen", "127.0.0.1:9090"}, nil)
	if err != nil || c.Limits.MaxConnsPerIP != 8 || c.Limits.MaxConns != 1024 || c.Limits.BodyTimeout != 2*time.Second ||
		!c.Metrics.PerSandboxLabels || c.Metrics.Listen != "127.0.0.1:9090" {
		t.Fatalf("from file: %+v %+v %v", c.Limits, c.Metrics, err)
	}
	for name, body := range map[string]string{
		"negative cap":   "limits:\n  max_conns: -1\n",
		"zero body":      "limits:\n  body_timeout: 0s\n",
		"negative rate":  "limits:\n  body_min_rate: -5\n",
		"metrics listen": "metrics:\n  listen: nope\n",
		"same listen":    "metrics:\n  listen: 127.0.0.1:7070\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		os.WriteFile(p, []byte("version: 1\n"+body), 0o600)
		if _, err := load(t, []string{"--config", p}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
