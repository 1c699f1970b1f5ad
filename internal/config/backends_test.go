package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nativeish and gvisorish stand for the backends' own config structs,
// which the config package does not know.
type nativeish struct {
	Landlock string `yaml:"landlock"`
	UIDRange uint32 `yaml:"uid_range"`
}

type gvisorish struct {
	DirectFS bool   `yaml:"directfs"`
	Platform string `yaml:"platform"`
}

func loadFile(t *testing.T, doc string, args ...string) (Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(p, []byte("version: 1\n"+doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return load(t, append([]string{"--config", p}, args...), nil)
}

func TestBackendSections(t *testing.T) {
	c, err := loadFile(t, "backends:\n  native:\n    landlock: require\n    uid_range: 1000\n  gvisor:\n    platform: ptrace\n")
	if err != nil {
		t.Fatal(err)
	}
	var n nativeish
	if err := c.BackendDecoder("native")(&n); err != nil || n.Landlock != "require" || n.UIDRange != 1000 {
		t.Fatalf("native section: %+v, %v", n, err)
	}
	g := gvisorish{Platform: "systrap"}
	if err := c.BackendDecoder("gvisor")(&g); err != nil || g.Platform != "ptrace" || g.DirectFS {
		t.Fatalf("gvisor section: %+v, %v", g, err)
	}
	if c.BackendDisabled("gvisor") || c.BackendDisabled("native") {
		t.Fatal("nothing was disabled")
	}
	// No section: the backend's defaults stay.
	g = gvisorish{Platform: "systrap"}
	c, _ = loadFile(t, "")
	if err := c.BackendDecoder("gvisor")(&g); err != nil || g.Platform != "systrap" {
		t.Fatalf("no section: %+v, %v", g, err)
	}
	// Unknown keys are the backend's to refuse.
	c, _ = loadFile(t, "backends:\n  gvisor:\n    platfrom: kvm\n")
	if err := c.BackendDecoder("gvisor")(&g); err == nil || !strings.Contains(err.Error(), "platfrom") {
		t.Fatalf("unknown key: %v", err)
	}
}

// The older top-level keys still load and win over the sections.
func TestBackendLegacyKeys(t *testing.T) {
	c, err := loadFile(t, "landlock: off\ngvisor:\n  directfs: true\n  disabled: true\nbackends:\n  native:\n    landlock: require\n")
	if err != nil {
		t.Fatal(err)
	}
	var n nativeish
	if err := c.BackendDecoder("native")(&n); err != nil || n.Landlock != "off" {
		t.Fatalf("landlock: %+v, %v", n, err)
	}
	var g gvisorish
	if err := c.BackendDecoder("gvisor")(&g); err != nil || !g.DirectFS {
		t.Fatalf("gvisor.directfs: %+v, %v", g, err)
	}
	if !c.BackendDisabled("gvisor") {
		t.Fatal("gvisor.disabled is ignored")
	}
	// The flag wins over the file.
	c, _ = loadFile(t, "backends:\n  native:\n    landlock: require\n", "--landlock", "best-effort")
	if err := c.BackendDecoder("native")(&n); err != nil || n.Landlock != "best-effort" {
		t.Fatalf("--landlock: %+v, %v", n, err)
	}
}

func TestBackendDisabled(t *testing.T) {
	c, err := loadFile(t, "backends:\n  gvisor:\n    disabled: true\n    directfs: true\n")
	if err != nil {
		t.Fatal(err)
	}
	var g gvisorish
	if !c.BackendDisabled("gvisor") || c.BackendDecoder("gvisor")(&g) != nil || !g.DirectFS {
		t.Fatalf("disabled section: disabled %v, %+v", c.BackendDisabled("gvisor"), g)
	}
	for doc, want := range map[string]string{
		"backend: gvisor\nbackends:\n  gvisor:\n    disabled: true\n": "disabled",
		"backend: gvisor\ngvisor:\n  disabled: true\n":                "disabled",
		"backends:\n  gvisor:\n    disabled: maybe\n":                 "true or false",
		"backends:\n  gvisor: [1, 2]\n":                               "mapping",
	} {
		if _, err := loadFile(t, doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", doc, err, want)
		}
	}
}
