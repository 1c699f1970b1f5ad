package eval

import (
	"os"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/guard"
	"github.com/warden-sandbox/warden/internal/guard/secrets"
)

// evalSplit is the split the bars are checked on; GUARD_EVAL_SPLIT=train
// shows the figures on the train split (for tuning).
func evalSplit() string {
	if s := os.Getenv("GUARD_EVAL_SPLIT"); s != "" {
		return s
	}
	return "dev"
}

// showErrors logs misclassified rows when GUARD_EVAL_SHOW is set.
func showErrors(t *testing.T, res []Result, positive string) {
	if os.Getenv("GUARD_EVAL_SHOW") == "" {
		return
	}
	for _, r := range res {
		pos := r.Row.Label == positive
		switch {
		case pos && !r.Hit():
			t.Logf("FN %s: %.400q", r.Row.Kind, r.Row.Text)
		case !pos && r.Hit():
			t.Logf("FP %s %s: %.400q", r.Row.Kind, r.Findings[0].Kind, r.Row.Text)
		}
	}
}

func TestSecretsEval(t *testing.T) {
	d, err := secrets.Default()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Load("testdata/secrets.jsonl.gz", evalSplit())
	if err != nil {
		t.Fatal(err)
	}
	res := Run(guard.NewScanner(d), rows, nil)
	all := Tally(res, "secret")
	groups := ByType(res)
	groups["ALL"] = all
	for _, enc := range []string{"plain", "json_escaped", "double_json", "nested", "base64", "url"} {
		groups["encoding="+enc] = Tally(Filter(res, func(r Result) bool { return r.Row.Encoding() == enc }), "secret")
	}
	var b strings.Builder
	Report(&b, groups)
	t.Logf("secrets, %s split, %d rules:\n%s", evalSplit(), d.Rules(), b.String())
	showErrors(t, res, "secret")
	if all.Recall() < 0.98 || all.Precision() < 0.95 {
		t.Errorf("secrets: recall %.3f precision %.3f, want recall >= 0.98 and precision >= 0.95", all.Recall(), all.Precision())
	}
}
