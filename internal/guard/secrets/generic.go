package secrets

import (
	"encoding/base64"
	"regexp"
	"strings"

	"github.com/warden-sandbox/warden/internal/guard"
)

// Generic secrets: a value whose name says it is a secret (a JSON member
// {"db_password": "..."}), judged by its shape and entropy. gitleaks'
// generic-api-key rule covers "name = value" in text.

// genericKeyWords are the parts of a member name that make its value a
// candidate.
var genericKeyWords = []string{"secret", "passw", "pwd", "token", "apikey", "api_key", "api-key",
	"access_key", "accesskey", "private_key", "credential", "auth", "signing_key", "encryption_key"}

// genericKeyAllow are member names that hold no secret although they
// contain one of the words.
var genericKeyAllow = regexp.MustCompile(`(?i)(?:_|-|^)(?:id|ids|name|type|url|uri|endpoint|file|path|length|size|expir\w*|ttl|count|header|hint|policy|version|enabled|required|method|scheme|prefix|mode)$|^(?:author\w*|auth_?type|token_?type|grant_type|oauth_?url|authority)$`)

func keyIsSecretish(key string) bool {
	if key == "" || len(key) > 64 {
		return false
	}
	lk := strings.ToLower(key)
	hit := false
	for _, w := range genericKeyWords {
		if strings.Contains(lk, w) {
			hit = true
			break
		}
	}
	return hit && !genericKeyAllow.MatchString(key)
}

// genericKeyed reports in.Text as a "generic-secret" when in.Key names a
// secret and the value looks like one: a single token of 10 to 200
// characters with letters and digits, high entropy and no placeholder.
func genericKeyed(in guard.Input, out []guard.Match) []guard.Match {
	if !keyIsSecretish(in.Key) {
		return out
	}
	v := strings.TrimSpace(in.Text)
	if len(v) < 10 || len(v) > 200 || strings.ContainsAny(v, " \t\r\n") || strings.Contains(v, "://") {
		return out
	}
	if !strings.ContainsAny(v, "0123456789") || !hasLetter(v) {
		return out
	}
	if entropy(v) < 3.0 || isPlaceholder(v) || identifierShape.MatchString(v) || knownExamples[v] {
		return out
	}
	s := strings.Index(in.Text, v)
	return append(out, guard.Match{Kind: "generic-secret", Start: s, End: s + len(v), Confidence: 0.6})
}

func hasLetter(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if 'a' <= c && c <= 'z' {
			return true
		}
	}
	return false
}

// placeholderRe matches values that stand for a secret without being one:
// template references, redactions, "your key here" and documentation
// examples.
var placeholderRe = regexp.MustCompile(`(?i)^\$\{?[A-Za-z_][\w.]*\}?$|\{\{.*\}\}|^<[^>]*>$|^%[A-Z_]+%$|x{6,}|\*{3,}|\.{3}|…|redacted|your[_-]?(?:api[_-]?)?(?:key|token|secret|password)|example|changeme|placeholder|dummy|^(?:process\.env|os\.environ|env)[.\[]`)

func isPlaceholder(s string) bool { return placeholderRe.MatchString(s) }

// extraRules are rules of our own for provider shapes that gitleaks' rules
// only find next to a keyword (a Telegram token without "telegram" nearby,
// an AWS secret key without "aws") or only before certain terminators (an
// Anthropic key followed by a full stop). Each has a literal that must be in
// the text before its expression runs.
func extraRules() []*rule {
	mk := func(id, need, expr string, group int, kw []string, check func(string) bool) *rule {
		return &rule{id: id, re: regexp.MustCompile(expr), secretGroup: group, need: need, keywords: kw, check: check, own: true}
	}
	rs := []*rule{
		mk("database-url-password", "://", `(?i)\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver|clickhouse)://[^\s:/?#@"'\\]*:([^\s@/?#"'\\]+)@[A-Za-z0-9.\-_\[\]]+`, 1, nil, dbPassword),
		mk("telegram-bot-token", ":AA", `\b\d{8,10}:AA[A-Za-z0-9_-]{33}(?:[^A-Za-z0-9_-]|$)`, 0, nil, nil),
		mk("openai-api-key", "T3BlbkFJ", `\bsk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9_-]{10,}T3BlbkFJ[A-Za-z0-9_-]{10,}`, 0, nil, nil),
		mk("anthropic-api-key", "sk-ant-", `\bsk-ant-(?:api03|admin01)-[A-Za-z0-9_-]{40,120}AA(?:[^A-Za-z0-9_-]|$)`, 0, nil, nil),
		mk("stripe-secret-key", "", `\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{16,247}\b`, 0, []string{"sk_live", "rk_live", "sk_test", "rk_test", "sk_prod", "rk_prod"}, nil),
		mk("slack-token", "xox", `\bxox[abposer]-(?:[0-9]{6,14}-){1,3}[A-Za-z0-9]{16,48}\b`, 0, nil, notZeroed),
		mk("google-api-key", "AIza", `\bAIza[0-9A-Za-z_-]{35}(?:[^0-9A-Za-z_-]|$)`, 0, nil, nil),
		mk("jwt", "eyJ", `\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}`, 0, nil, nil),
		mk("discord-bot-token", "", `\b[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}\b`, 0, nil, nil),
		mk("npm-access-token", "npm_", `\bnpm_[A-Za-z0-9]{36}\b`, 0, nil, nil),
		mk("sendgrid-api-token", "SG.", `\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b`, 0, nil, nil),
		mk("huggingface-access-token", "hf_", `\bhf_[A-Za-z]{34}\b`, 0, nil, nil),
		mk("pypi-upload-token", "pypi-", `\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}`, 0, nil, nil),
		mk("gitlab-pat", "glpat-", `\bglpat-[A-Za-z0-9_-]{20,}`, 0, nil, nil),
		mk("azure-storage-account-key", "AccountKey=", `AccountKey=([A-Za-z0-9+/]{60,}={0,2})`, 1, nil, nil),
		mk("http-basic-auth", "", `(?i)\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})`, 1, []string{"basic"}, basicAuth),
		{id: "aws-secret-access-key", own: true, scan: awsSecretKeys},
	}
	for _, r := range rs {
		if r.id == "discord-bot-token" {
			r.pre = discordShape
		}
	}
	return rs
}

// discordShape: a Discord token has a six-character middle part between
// two dots; only text with one runs the expression.
func discordShape(t string) bool {
	for i := strings.IndexByte(t, '.'); i >= 0 && i+7 < len(t); {
		if t[i+7] == '.' {
			ok := true
			for k := i + 1; k < i+7; k++ {
				c := t[k]
				if !(isWordByte(c) && c != '.') {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
		n := strings.IndexByte(t[i+1:], '.')
		if n < 0 {
			break
		}
		i += 1 + n
	}
	return false
}

// dbPassword rejects placeholder passwords in database URLs.
func dbPassword(p string) bool {
	lp := strings.ToLower(p)
	switch lp {
	case "password", "pass", "passwd", "secret", "pwd", "changeme", "admin", "root", "user", "test":
		return false
	}
	return !isPlaceholder(p)
}

func notZeroed(s string) bool { return !strings.Contains(s, "0000000000") }

// basicAuth accepts an HTTP Basic credential that decodes to user:password
// with a real password.
func basicAuth(b64 string) bool {
	dec, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		dec, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
		if err != nil {
			return false
		}
	}
	_, pw, ok := strings.Cut(string(dec), ":")
	return ok && len(pw) >= 4 && !isPlaceholder(pw) && dbPassword(pw)
}

// awsSecretKeys finds 40-character base64 words with upper case, lower
// case and digits, the shape of an AWS secret access key; hex digests and
// longer base64 runs do not qualify.
func awsSecretKeys(t string) [][2]int {
	var out [][2]int
	for i := 0; i < len(t); {
		if !awsChar(t[i]) {
			i++
			continue
		}
		j := i
		for j < len(t) && awsChar(t[j]) {
			j++
		}
		if j-i == 40 && (i == 0 || t[i-1] == '=' || !b64Word(t[i-1])) && (j == len(t) || !b64Word(t[j]) || t[j] == '.' && (j+1 == len(t) || !b64Word(t[j+1]))) {
			w := t[i:j]
			if mixed(w) && entropy(w) > 4.2 && !isPlaceholder(w) && !decodesToText(w) && !neutralName(t[:i]) && !inPEM(t[:i]) {
				out = append(out, [2]int{i, j})
			}
		}
		i = j
	}
	return out
}

// inPEM: the text before a word opens a PEM block it does not close (the
// last line of a PEM body can be 40 characters long).
func inPEM(before string) bool {
	b := strings.LastIndex(before, "-----BEGIN")
	return b >= 0 && !strings.Contains(before[b:], "-----END")
}

func awsChar(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '/' || c == '+'
}

// b64Word: characters that would make a 40-character run part of a longer
// token (or of percent-encoded text).
func b64Word(c byte) bool {
	return awsChar(c) || c == '_' || c == '-' || c == '.' || c == '=' || c == '%'
}

func mixed(s string) bool {
	var up, lo bool
	for i := 0; i < len(s); i++ {
		c := s[i]
		up = up || 'A' <= c && c <= 'Z'
		lo = lo || 'a' <= c && c <= 'z'
	}
	return up && lo
}

// decodesToText reports a base64 word that decodes to printable text: the
// scanner inspects the decoded text itself, so the encoded form is no
// finding of its own (a key's random bytes do not decode to text).
func decodesToText(w string) bool {
	if len(w) < 12 {
		return false
	}
	raw := strings.TrimRight(w, "=")
	var b []byte
	var err error
	if strings.ContainsAny(raw, "-_") {
		b, err = base64.RawURLEncoding.DecodeString(raw)
	} else {
		b, err = base64.RawStdEncoding.DecodeString(raw)
	}
	if err != nil || len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c >= 0x7f {
			return false
		}
	}
	return true
}

// neutralNameRe matches a name for an identifier, at the end of the text
// before a value: "ASSET_HASH=", "trace_id: ".
var neutralNameRe = regexp.MustCompile(`(?i)(?:hash|digest|checksum|sha\d*|trace[_ -]?id|span[_ -]?id|request[_ -]?id|build[_ -]?id|commit|etag|nonce|integrity|cache[_ -]?key|asset|artifact|image|version|uuid)["']?\s*[:=]\s*["']?$`)

func neutralName(before string) bool {
	if len(before) > 48 {
		before = before[len(before)-48:]
	}
	return neutralNameRe.MatchString(before)
}

// assignedName returns the name a generic rule's match assigns to, for
// "DB_PASSWORD = 'x'" the "DB_PASSWORD".
func assignedName(match, secret string) string {
	i := strings.Index(match, secret)
	if i < 0 {
		return ""
	}
	name := strings.TrimRight(match[:i], " \t'\"`=:>|,?")
	j := len(name)
	for j > 0 && (isWordByte(name[j-1]) || name[j-1] == ' ') {
		j--
	}
	return strings.TrimSpace(name[j:])
}

func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}

func isHexOrDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// knownExamples are credentials published in providers' documentation.
var knownExamples = map[string]bool{
	"sk_test_4eC39HqLyjWDarjtT1zdp7dc":         true, // Stripe's documented test key
	"pk_test_TYooMQauvdEDq54NiTphI7jx":         true,
	"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY": true, // AWS documentation
	"je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY": true,
}

// identifierShape matches values that are identifiers rather than secrets
// when a generic rule sees them: UUIDs, hex digests, ULIDs, publishable or
// object ids of known providers, file names.
var identifierShape = regexp.MustCompile(`^(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}|[0-9A-HJKMNP-TV-Z]{26}|pk_(?:live|test)_\w+|(?:ch|cus|in|sub|pi|pm|price|prod|evt|txn|acct|seti|src|card|ba|re|po)_[A-Za-z0-9]{8,}|AC[0-9a-f]{32}|[\w.-]+\.(?:js|css|map|png|svg|json|html)|(?:sha(?:1|256|384|512)|md5)[-:][A-Za-z0-9+/=]+)$`)

// vetoed reports findings of generic rules on identifier shapes, JWTs
// without a signature and documentation examples.
func vetoed(r *rule, secret, match string) bool {
	secret = strings.TrimRight(secret, ".")
	if knownExamples[secret] || knownExamples[match] {
		return true
	}
	switch {
	case r.generic:
		name := strings.ReplaceAll(assignedName(match, secret), " ", "_")
		return identifierShape.MatchString(secret) || decodesToText(secret) || !keyIsSecretish(name)
	case strings.HasPrefix(r.id, "curl-auth"):
		return identifierShape.MatchString(secret)
	case r.id == "jwt":
		return unsignedJWT(match)
	}
	return false
}

// unsignedJWT reports a JWT with an empty signature or "alg": "none".
func unsignedJWT(s string) bool {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 3 || parts[2] == "" {
		return true
	}
	h, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[0], "="))
	return err == nil && strings.Contains(strings.ReplaceAll(strings.ToLower(string(h)), " ", ""), `"alg":"none"`)
}

// disabledRules are gitleaks rules the decoding layer supersedes: the
// Kubernetes Secret rule reports any base64 data value, where the scanner
// decodes the value and judges what it holds.
var disabledRules = map[string]bool{"kubernetes-secret-yaml": true}
