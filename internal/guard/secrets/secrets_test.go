package secrets

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/guard"
)

func TestGitleaksRulesLoad(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if d.Rules() < 200 {
		t.Fatalf("only %d rules", d.Rules())
	}
	if _, err := New([]byte("[[rules]]\nid = \"x\"\nregex = '''(['''\n")); err == nil {
		t.Fatal("a broken regex was accepted")
	}
}

// A fake GitHub token (format-correct shape, not a real credential).
const ghToken = "ghp_" + "R7xk2Lq9VbN4mT8sWc1YzP6dHf3Jg0Ae5Uio"

func TestFindsAndMasksInToolCall(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	s := guard.NewScanner(d)
	inner, _ := json.Marshal(map[string]string{"command": "git push https://x:" + ghToken + "@github.com/acme/app"})
	k8s := base64.StdEncoding.EncodeToString([]byte("client_secret=Zq8" + "vN2kLp5Rt7Wx9Yb3Cd6"))
	body, _ := json.Marshal(map[string]any{"method": "tools/call", "params": map[string]any{"name": "shell", "arguments": map[string]any{
		"args": string(inner), "env": []string{"A=1", "DB=postgres://app:S3cr3tPassw0rd9@db.internal:5432/app"}, "blob": k8s,
		"config": map[string]string{"api_token": "Yh5" + "Tq9Lm2Vx7Rk4Wp8Nz"},
	}}})
	fs, err := s.InspectJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, f := range fs {
		kinds[f.Kind] = f.Path
	}
	for _, want := range []string{"github-pat", "database-url-password", "generic-secret"} {
		if _, ok := kinds[want]; !ok {
			t.Errorf("no %s finding in %+v", want, fs)
		}
	}
	if p := kinds["github-pat"]; p != "params.arguments.args.command" {
		t.Errorf("github-pat path %q", p)
	}
	m := guard.Mask(string(body), fs)
	if !json.Valid([]byte(m)) {
		t.Fatalf("masked JSON invalid: %s", m)
	}
	for _, v := range []string{ghToken, "S3cr3tPassw0rd9", k8s, "Yh5Tq9Lm2Vx7Rk4Wp8Nz"} {
		if strings.Contains(m, v) {
			t.Errorf("masked output holds %q", v)
		}
	}
}

func TestNotSecrets(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	s := guard.NewScanner(d)
	for _, in := range []string{
		`{"api_key": "${OPENAI_API_KEY}"}`,
		`{"token": "sk_live_****abcd"}`,
		"AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
		`{"request_id": "6f1c2b9e-4a57-4c1e-9d7a-0b5e3f2a8c61"}`,
		"DATABASE_URL=postgres://localhost:5432/app_dev",
		"DATABASE_URL=mysql://root:${MYSQL_PASSWORD}@db:3306/app",
		"commit 3f786850e387550fdab836ed7e6dc881de23001b",
		"Authorization: Bearer eyJhbGciOiJub25lIn0.eyJwYWdlIjoyfQ.",
		`{"publishable_key": "pk_live_51HqLyjWDarjtT1zdp7dcXYZ"}`,
	} {
		if fs := s.Inspect(in); len(fs) != 0 {
			t.Errorf("%q: findings %+v", in, fs)
		}
	}
}
