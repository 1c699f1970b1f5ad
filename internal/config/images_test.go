package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImagesConfig(t *testing.T) {
	dir := t.TempDir()
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Images != DefaultImages() || len(c.Registries.Allow) != 0 {
		t.Fatalf("defaults: images %+v, registries %+v", c.Images, c.Registries)
	}
	file := filepath.Join(dir, "ok.yaml")
	os.WriteFile(file, []byte(`version: 1
registries:
  allow:
    - host: 127.0.0.1:5000
      insecure: true
    - host: Registry.Internal
    - host: "[::1]:5000"
images:
  max_uncompressed_bytes: 1048576
  max_entries: 10
`), 0o600)
	c, err = load(t, []string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Registries.Allow) != 3 || !c.Registries.Allow[0].Insecure || c.Registries.Allow[1].Insecure ||
		c.Images.MaxUncompressedBytes != 1<<20 || c.Images.MaxEntries != 10 || c.Images.MaxRatio != DefaultImages().MaxRatio {
		t.Fatalf("parsed %+v %+v", c.Registries, c.Images)
	}
	for name, body := range map[string]string{
		"scheme":        "registries:\n  allow:\n    - host: http://x\n",
		"path":          "registries:\n  allow:\n    - host: x/y\n",
		"port":          "registries:\n  allow:\n    - host: x:99999\n",
		"bare ipv6":     "registries:\n  allow:\n    - host: \"::1\"\n",
		"empty":         "registries:\n  allow:\n    - insecure: true\n",
		"twice":         "registries:\n  allow:\n    - host: x:1\n    - host: X:1\n",
		"unknown field": "registries:\n  allow:\n    - host: x\n      plain: true\n",
		"zero":          "images:\n  max_entries: 0\n",
		"negative":      "images:\n  max_ratio: -1\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		os.WriteFile(p, []byte("version: 1\n"+body), 0o600)
		if _, err := load(t, []string{"--config", p}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "registries") && !strings.Contains(err.Error(), "images") && !strings.Contains(err.Error(), "field") {
			t.Errorf("%s: unclear error %v", name, err)
		}
	}
}
