package eval

import (
	"fmt"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/guard"
	"github.com/warden-sandbox/warden/internal/guard/pii"
)

// piiGroup is a set of PII row types and the finding kinds that detect
// them.
type piiGroup struct {
	name      string
	types     func(string) bool
	kinds     []string
	recall    float64 // bars on the dev split; 0: reported only
	precision float64
}

func prefixes(ps ...string) func(string) bool {
	return func(t string) bool {
		for _, p := range ps {
			if strings.HasPrefix(t, p) {
				return true
			}
		}
		return false
	}
}

// piiGroups: the checksummed kinds (cards: Luhn, IBANs: mod-97) are held to
// the bars (recall 0.98, precision 0.95). SSNs have range rules but
// no checksum: nine bare digits count only next to a word that says SSN (or
// in a member named so), which costs some recall, so their recall bar is
// 0.95. E-mail, phone and IP are validated by shape and held to their own
// bars. Postal addresses are not detected and only reported.
var piiGroups = []piiGroup{
	{"checksummed (card, iban)", prefixes("credit_card_", "iban_"), []string{pii.KindCard, pii.KindIBAN}, 0.98, 0.95},
	{"us_ssn", prefixes("us_ssn"), []string{pii.KindSSN}, 0.95, 0.95},
	{"email", prefixes("email"), []string{pii.KindEmail}, 0.95, 0.95},
	{"phone", prefixes("phone_"), []string{pii.KindPhone}, 0.90, 0.90},
	{"ip", prefixes("ipv4", "ipv6"), []string{pii.KindIPv4, pii.KindIPv6}, 0.95, 0.90},
	{"address (not detected)", prefixes("address_"), nil, 0, 0},
}

// groupCounts: TP/FN over the group's rows, FP over every other row that
// got a finding of the group's kinds.
func groupCounts(res []Result, g piiGroup) Counts {
	var c Counts
	for _, r := range res {
		hit := false
		for _, f := range r.Findings {
			for _, k := range g.kinds {
				if f.Kind == k {
					hit = true
				}
			}
		}
		in := r.Row.Label == "pii" && g.types(r.Row.Type())
		switch {
		case in && hit:
			c.TP++
		case in:
			c.FN++
		case hit:
			c.FP++
		default:
			c.TN++
		}
	}
	return c
}

func TestPIIEval(t *testing.T) {
	rows, err := Load("testdata/pii.jsonl.gz", evalSplit())
	if err != nil {
		t.Fatal(err)
	}
	res := Run(guard.NewScanner(pii.New()), rows, nil)
	groups := ByType(res)
	groups["ALL (any kind, addresses included)"] = Tally(res, "pii")
	var fails []string
	for _, g := range piiGroups {
		c := groupCounts(res, g)
		groups["GROUP "+g.name] = c
		if g.recall > 0 && (c.Recall() < g.recall || c.Precision() < g.precision) {
			fails = append(fails, fmt.Sprintf("%s: recall %.3f precision %.3f, want >= %.2f and >= %.2f", g.name, c.Recall(), c.Precision(), g.recall, g.precision))
		}
	}
	var b strings.Builder
	Report(&b, groups)
	t.Logf("pii, %s split:\n%s", evalSplit(), b.String())
	showErrors(t, Filter(res, func(r Result) bool { return !strings.HasPrefix(r.Row.Type(), "address_") }), "pii")
	for _, f := range fails {
		t.Error(f)
	}
}
