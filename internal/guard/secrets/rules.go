package secrets

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// The rule set is gitleaks' default configuration, kept verbatim in
// rules/gitleaks.toml (MIT, see rules/LICENSE.gitleaks) and refreshed from a
// gitleaks release by scripts/refresh-gitleaks-rules.sh. Rules that match
// on a file path only are skipped: a tool argument has no path.

//go:embed rules/gitleaks.toml
var gitleaksTOML []byte

// GitleaksVersion is the gitleaks release rules/gitleaks.toml comes from.
const GitleaksVersion = "v8.30.0"

type tomlConfig struct {
	Title     string         `toml:"title"`
	Allowlist *tomlAllowlist `toml:"allowlist"`
	Rules     []tomlRule     `toml:"rules"`
}

type tomlRule struct {
	ID          string          `toml:"id"`
	Description string          `toml:"description"`
	Regex       string          `toml:"regex"`
	Path        string          `toml:"path"`
	SecretGroup int             `toml:"secretGroup"`
	Entropy     float64         `toml:"entropy"`
	Keywords    []string        `toml:"keywords"`
	Allowlists  []tomlAllowlist `toml:"allowlists"`
}

type tomlAllowlist struct {
	Description string   `toml:"description"`
	Condition   string   `toml:"condition"`
	RegexTarget string   `toml:"regexTarget"`
	Regexes     []string `toml:"regexes"`
	StopWords   []string `toml:"stopwords"`
	Paths       []string `toml:"paths"`
	Commits     []string `toml:"commits"`
}

// rule is a compiled rule.
type rule struct {
	id          string
	re          *regexp.Regexp
	secretGroup int
	entropy     float64
	keywords    []string // lower case
	allow       []allowlist
	generic     bool // a generic rule: the secret must also hold a digit
	// Rules of our own (extraRules) may have:
	own   bool
	need  string                   // a literal the text must hold (case-sensitive)
	pre   func(t string) bool      // or a cheap test the text must pass
	check func(secret string) bool // a validity check on the secret
	scan  func(t string) [][2]int  // code instead of an expression
}

type allowlist struct {
	and       bool
	target    string // "", "match" or "line"
	regexes   []*regexp.Regexp
	stopwords []string // lower case
	hasPaths  bool     // a path criterion, never true for content
}

// ruleSet is a parsed configuration.
type ruleSet struct {
	rules  []*rule
	global []allowlist
}

// parseRules parses a gitleaks configuration.
func parseRules(data []byte) (*ruleSet, error) {
	var c tomlConfig
	if _, err := toml.Decode(string(data), &c); err != nil {
		return nil, fmt.Errorf("parse gitleaks rules: %w", err)
	}
	rs := &ruleSet{}
	if c.Allowlist != nil {
		al, err := compileAllowlist(*c.Allowlist)
		if err != nil {
			return nil, fmt.Errorf("global allowlist: %w", err)
		}
		rs.global = append(rs.global, al)
	}
	for _, tr := range c.Rules {
		if tr.Regex == "" || disabledRules[tr.ID] {
			continue // path-only rule, or superseded
		}
		re, err := regexp.Compile(tr.Regex)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", tr.ID, err)
		}
		r := &rule{id: tr.ID, re: re, secretGroup: tr.SecretGroup, entropy: tr.Entropy,
			generic: strings.HasPrefix(tr.ID, "generic")}
		if r.secretGroup > re.NumSubexp() {
			return nil, fmt.Errorf("rule %s: secretGroup %d out of range", tr.ID, r.secretGroup)
		}
		for _, k := range tr.Keywords {
			r.keywords = append(r.keywords, strings.ToLower(k))
		}
		for _, a := range tr.Allowlists {
			al, err := compileAllowlist(a)
			if err != nil {
				return nil, fmt.Errorf("rule %s allowlist: %w", tr.ID, err)
			}
			r.allow = append(r.allow, al)
		}
		rs.rules = append(rs.rules, r)
	}
	return rs, nil
}

func compileAllowlist(a tomlAllowlist) (allowlist, error) {
	al := allowlist{and: strings.EqualFold(a.Condition, "AND"), target: a.RegexTarget, hasPaths: len(a.Paths) > 0 || len(a.Commits) > 0}
	for _, s := range a.Regexes {
		re, err := regexp.Compile(s)
		if err != nil {
			return allowlist{}, err
		}
		al.regexes = append(al.regexes, re)
	}
	for _, w := range a.StopWords {
		al.stopwords = append(al.stopwords, strings.ToLower(w))
	}
	return al, nil
}

// allowed reports whether the allowlist lets the finding go, following
// gitleaks: with "OR" any criterion suffices, with "AND" all the criteria it
// has must hold. A path or commit criterion never holds for content.
func (a *allowlist) allowed(secret, match, line string) bool {
	target := secret
	switch a.target {
	case "match":
		target = match
	case "line":
		target = line
	}
	var checks, hits int
	if len(a.regexes) > 0 {
		checks++
		for _, re := range a.regexes {
			if re.MatchString(target) {
				hits++
				break
			}
		}
	}
	if len(a.stopwords) > 0 {
		checks++
		ls := strings.ToLower(secret)
		for _, w := range a.stopwords {
			if strings.Contains(ls, w) {
				hits++
				break
			}
		}
	}
	if a.hasPaths {
		checks++
	}
	if checks == 0 {
		return false
	}
	if a.and {
		return hits == checks
	}
	return hits > 0
}
