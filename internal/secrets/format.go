package secrets

import (
	"encoding/base64"
	"strings"
)

// FormatBasic is the grant format of HTTP Basic credentials: the sandbox
// sends "Basic base64(user:PLACEHOLDER)" (git's http.extraHeader, for one),
// and the broker decodes the credentials, replaces the placeholder in them
// with the value and encodes them again. A plain grant cannot do that: the
// placeholder is not visible in base64.
const FormatBasic = "basic"

// Carries reports whether a header value holds g's placeholder in g's
// format.
func (g *Grant) Carries(value string) bool {
	if g.Format != FormatBasic {
		return strings.Contains(value, g.Placeholder)
	}
	creds, ok := basicCredentials(value)
	return ok && strings.Contains(creds, g.Placeholder)
}

// Substitute returns value with g's placeholder replaced by secret, in g's
// format. For FormatBasic it also returns the encoded credentials sent
// (sent) and the ones the sandbox wrote (shown), so that an echo of the
// header can be scrubbed back; both are "" for a plain grant. A value that
// does not carry the placeholder comes back unchanged.
func (g *Grant) Substitute(value string, secret []byte) (out, sent, shown string) {
	if g.Format != FormatBasic {
		return strings.ReplaceAll(value, g.Placeholder, string(secret)), "", ""
	}
	creds, ok := basicCredentials(value)
	if !ok || !strings.Contains(creds, g.Placeholder) {
		return value, "", ""
	}
	scheme, _, _ := strings.Cut(strings.TrimLeft(value, " \t"), " ")
	shown = base64.StdEncoding.EncodeToString([]byte(creds))
	sent = base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(creds, g.Placeholder, string(secret))))
	return scheme + " " + sent, sent, shown
}

// basicCredentials decodes the credentials of a "Basic <base64>" header
// value (the scheme in any case, standard base64 with or without padding).
func basicCredentials(value string) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimLeft(value, " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	rest = strings.Trim(rest, " \t")
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(rest); err != nil {
			return "", false
		}
	}
	return string(b), true
}
