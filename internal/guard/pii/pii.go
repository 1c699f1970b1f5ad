// Package pii is the personal-data detector of Warden's guardrails: e-mail
// addresses, phone numbers, payment cards, IBANs, US social security
// numbers and public IP addresses. Every candidate passes a validity check
// before it is reported: Luhn and the issuer prefix for cards, mod-97 and
// the country's length for IBANs, the assigned ranges for SSNs, public
// address space for IPs, a real (not a documentation) domain for e-mail, a
// numbering shape for phones. It implements guard.Detector; the
// guard.Scanner does the decoding (JSON strings, base64, URL and
// backslash escapes).
package pii

import (
	"strings"

	"github.com/warden-sandbox/warden/internal/guard"
)

// ID is the detector's ID.
const ID = "pii"

// Kinds reported.
const (
	KindEmail = "email"
	KindPhone = "phone"
	KindCard  = "credit_card"
	KindIBAN  = "iban"
	KindSSN   = "us_ssn"
	KindIPv4  = "ipv4"
	KindIPv6  = "ipv6"
)

// Checksummed reports whether findings of kind pass a checksum (Luhn,
// mod-97) rather than a shape check only.
func Checksummed(kind string) bool { return kind == KindCard || kind == KindIBAN }

// Detector finds personal data. The zero value detects every kind.
type Detector struct {
	// Kinds limits the kinds reported; empty means all.
	Kinds []string
}

// New returns a detector for kinds (all when none are given).
func New(kinds ...string) *Detector { return &Detector{Kinds: kinds} }

// ID implements guard.Detector.
func (d *Detector) ID() string { return ID }

func (d *Detector) wants(kind string) bool {
	if len(d.Kinds) == 0 {
		return true
	}
	for _, k := range d.Kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// Detect implements guard.Detector.
func (d *Detector) Detect(in guard.Input, out []guard.Match) []guard.Match {
	t := in.Text
	if len(t) < 5 {
		return out
	}
	start := len(out)
	if strings.IndexByte(t, '@') >= 0 && d.wants(KindEmail) {
		out = emails(t, out)
	}
	if hasDigits(t) {
		if d.wants(KindIBAN) {
			out = ibans(t, out)
		}
		if d.wants(KindCard) {
			out = cards(t, out)
		}
		if d.wants(KindSSN) {
			out = ssns(in, out)
		}
		if d.wants(KindIPv4) && strings.IndexByte(t, '.') >= 0 {
			out = ipv4s(in, out)
		}
		if d.wants(KindIPv6) && strings.Count(t, ":") >= 2 {
			out = ipv6s(t, out)
		}
		if d.wants(KindPhone) {
			out = phones(t, out)
		}
	}
	return dropOverlaps(out, start)
}

// dropOverlaps removes a match that overlaps an earlier one: the order of
// the checks above ranks them (an IBAN's digits are not also a phone).
func dropOverlaps(out []guard.Match, start int) []guard.Match {
	w := start
	for i := start; i < len(out); i++ {
		keep := true
		for j := start; j < w; j++ {
			if out[j].Start < out[i].End && out[i].Start < out[j].End {
				keep = false
				break
			}
		}
		if keep {
			out[w] = out[i]
			w++
		}
	}
	return out[:w]
}

func hasDigits(t string) bool {
	for i := 0; i < len(t); i++ {
		if isDigit(t[i]) {
			return true
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlnum(c byte) bool { return isDigit(c) || isUpper(c) || isLower(c) }

// boundaryBefore reports whether a number may start at i: not inside a
// word, a longer number or a decimal.
func boundaryBefore(t string, i int) bool {
	if i == 0 {
		return true
	}
	c := t[i-1]
	if isAlnum(c) || c == '_' {
		return false
	}
	if (c == '.' || c == '-' || c == '/' || c == ':') && i >= 2 && isAlnum(t[i-2]) {
		return false
	}
	return true
}

// boundaryAfter reports whether a number may end at j.
func boundaryAfter(t string, j int) bool {
	if j >= len(t) {
		return true
	}
	c := t[j]
	if isAlnum(c) || c == '_' {
		return false
	}
	if (c == '.' || c == '-' || c == '/' || c == ':') && j+1 < len(t) && isAlnum(t[j+1]) {
		return false
	}
	return true
}

// lowerASCII lower-cases ASCII letters of a short window.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if isUpper(c) {
			b[i] = c + 32
		}
	}
	return string(b)
}

// before returns up to n bytes before i.
func before(t string, i, n int) string {
	if i < n {
		return t[:i]
	}
	return t[i-n : i]
}
