package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGovernanceConfig(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Governance; g.Default != "" || g.ApprovalWebhook.URL != "" {
		t.Fatalf("default governance: %+v (want the engine's defaults: allow)", g)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "w.yaml")
	os.WriteFile(file, []byte("version: 1\ngovernance:\n  default: deny\n  eval_timeout: 250ms\n  approval_ttl: 1h\n"+
		"  approval_webhook:\n    url: https://hooks.example.com/w\n    secret_file: /etc/w.key\n"), 0o600)
	c, err = load(t, []string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Governance; g.Default != "deny" || g.EvalTimeout != 250*time.Millisecond || g.ApprovalTTL != time.Hour ||
		g.ApprovalWebhook.URL != "https://hooks.example.com/w" || g.ApprovalWebhook.SecretFile != "/etc/w.key" {
		t.Fatalf("from file: %+v", g)
	}
	for name, body := range map[string]string{
		"bad default":        "governance:\n  default: maybe\n",
		"negative timeout":   "governance:\n  eval_timeout: -1s\n",
		"webhook not http":   "governance:\n  approval_webhook:\n    url: ftp://x/y\n    secret_file: /k\n",
		"webhook no secret":  "governance:\n  approval_webhook:\n    url: https://x/y\n",
		"unknown governance": "governance:\n  defualt: deny\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		os.WriteFile(p, []byte("version: 1\n"+body), 0o600)
		if _, err := load(t, []string{"--config", p}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
