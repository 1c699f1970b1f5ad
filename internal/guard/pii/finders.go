package pii

import (
	"net/netip"
	"strings"

	"github.com/warden-sandbox/warden/internal/guard"
)

// ---- e-mail ----

func emailLocal(c byte) bool {
	return isAlnum(c) || strings.IndexByte(".!#$%&'*+/=?^_`{|}~-", c) >= 0
}

func emailDomain(c byte) bool { return isAlnum(c) || c == '-' || c == '.' }

func emails(t string, out []guard.Match) []guard.Match {
	for at := strings.IndexByte(t, '@'); at >= 0; {
		i := at
		for i > 0 && emailLocal(t[i-1]) && at-i < 64 {
			i--
		}
		for i < at && (t[i] == '.' || t[i] == '\'' || t[i] == '`') {
			i++
		}
		j := at + 1
		for j < len(t) && emailDomain(t[j]) {
			j++
		}
		for j > at+1 && (t[j-1] == '.' || t[j-1] == '-') {
			j--
		}
		if i < at && validDomain(t[at+1:j]) && !placeholderEmail(t[i:at], t[at+1:j]) && t[at-1] != '.' {
			out = append(out, guard.Match{Kind: KindEmail, Start: i, End: j, Confidence: 0.95})
		}
		n := strings.IndexByte(t[at+1:], '@')
		if n < 0 {
			break
		}
		at += 1 + n
	}
	return out
}

func validDomain(d string) bool {
	if len(d) < 4 || len(d) > 253 || strings.Contains(d, "..") {
		return false
	}
	dot := strings.LastIndexByte(d, '.')
	if dot <= 0 {
		return false
	}
	tld := d[dot+1:]
	if len(tld) < 2 || len(tld) > 24 {
		return false
	}
	for i := 0; i < len(tld); i++ {
		if !isUpper(tld[i]) && !isLower(tld[i]) {
			return false
		}
	}
	return d[0] != '-' && d[0] != '.'
}

// placeholderEmail: documentation and template addresses (RFC 2606 names,
// "you@yourcompany.com").
func placeholderEmail(local, domain string) bool {
	d := lowerASCII(domain)
	for _, suf := range []string{".example", ".invalid", ".test", ".localhost", ".local"} {
		if strings.HasSuffix(d, suf) {
			return true
		}
	}
	switch d {
	case "example.com", "example.org", "example.net", "example.edu", "domain.com", "yourdomain.com",
		"yourcompany.com", "company.com", "email.example", "acme.example":
		return true
	}
	if strings.HasPrefix(d, "example.") || strings.HasSuffix(d, ".example.com") {
		return true
	}
	return strings.HasPrefix(local, "{{") || strings.HasPrefix(local, "${")
}

// ---- IBAN ----

// ibanLen is the IBAN length per country (SWIFT IBAN registry).
var ibanLen = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
	"BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
	"ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
	"HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
	"LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
	"MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
	"RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
	"TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}

func ibans(t string, out []guard.Match) []guard.Match {
	for i := 0; i+4 <= len(t); i++ {
		if !isUpper(t[i]) || !isUpper(t[i+1]) || !isDigit(t[i+2]) || !isDigit(t[i+3]) || !boundaryBefore(t, i) {
			continue
		}
		n, ok := ibanLen[t[i:i+2]]
		if !ok {
			continue
		}
		// Collect n characters, allowing single spaces between groups.
		var buf [34]byte
		k, j := 0, i
		for j < len(t) && k < n {
			c := t[j]
			switch {
			case isDigit(c) || isUpper(c):
				buf[k] = c
				k++
				j++
			case c == ' ' && k >= 4 && j+1 < len(t) && (isDigit(t[j+1]) || isUpper(t[j+1])) && t[j-1] != ' ':
				j++
			default:
				k = -1
			}
			if k < 0 {
				break
			}
		}
		if k != n || !boundaryAfter(t, j) || !mod97(buf[:n]) {
			continue
		}
		out = append(out, guard.Match{Kind: KindIBAN, Start: i, End: j, Confidence: 0.98})
		i = j - 1
	}
	return out
}

// mod97 checks an IBAN (ISO 13616): move the first four characters to the
// end, letters become 10..35, the number mod 97 must be 1.
func mod97(b []byte) bool {
	r := 0
	add := func(c byte) {
		if isDigit(c) {
			r = (r*10 + int(c-'0')) % 97
			return
		}
		v := int(c-'A') + 10
		r = (r*100 + v) % 97
	}
	for _, c := range b[4:] {
		add(c)
	}
	for _, c := range b[:4] {
		add(c)
	}
	return r == 1
}

// ---- payment cards ----

// digitGroups reads digits from i, allowing one separator (space or dash,
// the same throughout) between groups. It returns the digits, the end
// offset and whether a separator was used.
func digitGroups(t string, i, max int, buf []byte) ([]byte, int, byte) {
	var sep byte
	j := i
	d := buf[:0]
	for j < len(t) && len(d) < max {
		c := t[j]
		if isDigit(c) {
			d = append(d, c)
			j++
			continue
		}
		if (c == ' ' || c == '-') && j+1 < len(t) && isDigit(t[j+1]) && j > i && isDigit(t[j-1]) && (sep == 0 || sep == c) {
			sep = c
			j++
			continue
		}
		break
	}
	return d, j, sep
}

func cards(t string, out []guard.Match) []guard.Match {
	var buf [24]byte
	for i := 0; i < len(t); i++ {
		if !isDigit(t[i]) || !boundaryBefore(t, i) {
			continue
		}
		d, j, sep := digitGroups(t, i, 20, buf[:])
		if len(d) >= 13 && len(d) <= 19 && boundaryAfter(t, j) && cardBrand(d) && luhn(d) && !sameDigits(d) &&
			(sep == 0 || cardGroups(t[i:j], sep)) && !afterIBANPrefix(t, i) {
			out = append(out, guard.Match{Kind: KindCard, Start: i, End: j, Confidence: 0.95})
		}
		i = j
	}
	return out
}

// cardGroups: a card printed in groups starts with four digits and has no
// group shorter than three (4-4-4-4, 4-6-5, 4-6-4).
func cardGroups(s string, sep byte) bool {
	groups := strings.Split(s, string(sep))
	if len(groups[0]) != 4 {
		return false
	}
	for _, g := range groups {
		if len(g) < 3 {
			return false
		}
	}
	return true
}

// afterIBANPrefix: digits after "AT82 " are the rest of an IBAN-shaped
// string (one with a wrong check, as the IBAN check ran first).
func afterIBANPrefix(t string, i int) bool {
	return i >= 5 && t[i-1] == ' ' && isUpper(t[i-5]) && isUpper(t[i-4]) && isDigit(t[i-3]) && isDigit(t[i-2])
}

func luhn(d []byte) bool {
	sum := 0
	for k := 0; k < len(d); k++ {
		v := int(d[len(d)-1-k] - '0')
		if k%2 == 1 {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
	}
	return sum%10 == 0
}

func sameDigits(d []byte) bool {
	for _, c := range d[1:] {
		if c != d[0] {
			return false
		}
	}
	return true
}

func prefixNum(d []byte, n int) int {
	v := 0
	for k := 0; k < n && k < len(d); k++ {
		v = v*10 + int(d[k]-'0')
	}
	return v
}

// cardBrand checks the issuer prefix and length of the major networks.
func cardBrand(d []byte) bool {
	n := len(d)
	p1, p2, p3, p4, p6 := prefixNum(d, 1), prefixNum(d, 2), prefixNum(d, 3), prefixNum(d, 4), prefixNum(d, 6)
	switch {
	case p1 == 4: // Visa
		return n == 13 || n == 16 || n == 19
	case p2 >= 51 && p2 <= 55, p4 >= 2221 && p4 <= 2720: // Mastercard
		return n == 16
	case p2 == 34 || p2 == 37: // American Express
		return n == 15
	case p4 == 6011, p2 == 65, p3 >= 644 && p3 <= 649, p6 >= 622126 && p6 <= 622925: // Discover
		return n >= 16 && n <= 19
	case p4 >= 3528 && p4 <= 3589: // JCB
		return n >= 16 && n <= 19
	case p2 == 36, p3 >= 300 && p3 <= 305, p2 == 38 || p2 == 39: // Diners Club
		return n >= 14 && n <= 19
	case p2 == 62: // UnionPay
		return n >= 16 && n <= 19
	}
	return false
}

// ---- US SSN ----

// ssns finds SSNs written 123-45-6789 or 123 45 6789, and nine bare digits
// next to a name that says SSN.
func ssns(in guard.Input, out []guard.Match) []guard.Match {
	t := in.Text
	keyed := strings.Contains(lowerASCII(in.Key), "ssn") || strings.Contains(lowerASCII(in.Key), "social")
	for i := 0; i+9 <= len(t); i++ {
		if !isDigit(t[i]) || !boundaryBefore(t, i) {
			continue
		}
		var a, g, s string
		end := 0
		switch {
		case i+11 <= len(t) && allDigits(t[i:i+3]) && (t[i+3] == '-' || t[i+3] == ' ') && allDigits(t[i+4:i+6]) && t[i+6] == t[i+3] && allDigits(t[i+7:i+11]):
			a, g, s, end = t[i:i+3], t[i+4:i+6], t[i+7:i+11], i+11
		case allDigits(t[i:i+9]) && (keyed || ssnContext(t, i)):
			a, g, s, end = t[i:i+3], t[i+3:i+5], t[i+5:i+9], i+9
		default:
			for i < len(t) && isDigit(t[i]) {
				i++
			}
			continue
		}
		if !boundaryAfter(t, end) || (end < len(t) && (t[end] == ' ' || t[end] == '-') && end+1 < len(t) && isDigit(t[end+1])) {
			i = end
			continue
		}
		if validSSN(a, g, s) {
			out = append(out, guard.Match{Kind: KindSSN, Start: i, End: end, Confidence: 0.85})
		}
		i = end
	}
	return out
}

func ssnContext(t string, i int) bool {
	w := lowerASCII(before(t, i, 40))
	return strings.Contains(w, "ssn") || strings.Contains(w, "social security") || strings.Contains(w, "tin")
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// validSSN: area not 000, 666 or 900-999; group not 00; serial not 0000;
// not a number the SSA voided for advertising.
func validSSN(a, g, s string) bool {
	if a == "000" || a == "666" || a[0] == '9' || g == "00" || s == "0000" {
		return false
	}
	switch a + g + s {
	case "078051120", "219099999", "123456789":
		return false
	}
	return true
}

// ---- IP addresses ----

func ipv4s(in guard.Input, out []guard.Match) []guard.Match {
	t := in.Text
	lk := lowerASCII(in.Key)
	if strings.Contains(lk, "version") || strings.Contains(lk, "agent") || strings.Contains(lk, "build") {
		return out
	}
	for i := 0; i < len(t); i++ {
		if !isDigit(t[i]) || !boundaryBefore(t, i) {
			continue
		}
		j, dots := i, 0
		for j < len(t) && (isDigit(t[j]) || t[j] == '.' && j+1 < len(t) && isDigit(t[j+1]) && dots < 3) {
			if t[j] == '.' {
				dots++
			}
			j++
		}
		if dots == 3 && boundaryAfter(t, j) && !versionContext(t, i) && (j-i > 7 || ipContext(t, i)) {
			if a, err := netip.ParseAddr(t[i:j]); err == nil && publicIP(a) {
				out = append(out, guard.Match{Kind: KindIPv4, Start: i, End: j, Confidence: 0.8})
			}
		}
		i = j
	}
	return out
}

// versionContext: a dotted quad after "version", "build", "v" or a
// product/ is a version number.
func versionContext(t string, i int) bool {
	if i > 0 && (t[i-1] == 'v' || t[i-1] == 'V' || t[i-1] == '/') {
		return true
	}
	w := lowerASCII(before(t, i, 16))
	return strings.Contains(w, "version") || strings.Contains(w, "build") || strings.Contains(w, "release") || strings.Contains(w, "agent")
}

// ipContext: a word before a short dotted quad (all octets one digit, like
// 8.8.8.8) that says it is an address; without one it is read as a
// version.
func ipContext(t string, i int) bool {
	w := lowerASCII(before(t, i, 24))
	for _, k := range []string{"ip", "addr", "host", "server", "dns", "from", "peer", "client"} {
		if strings.Contains(w, k) {
			return true
		}
	}
	return false
}

func hexOrColon(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':' || c == '.'
}

func ipv6s(t string, out []guard.Match) []guard.Match {
	for i := 0; i < len(t); i++ {
		if !hexOrColon(t[i]) || (i > 0 && (isAlnum(t[i-1]) || t[i-1] == ':')) {
			continue
		}
		j, colons := i, 0
		for j < len(t) && hexOrColon(t[j]) {
			if t[j] == ':' {
				colons++
			}
			j++
		}
		for j > i && t[j-1] == '.' {
			j--
		}
		if colons >= 2 && (j == len(t) || !isAlnum(t[j])) {
			if a, err := netip.ParseAddr(t[i:j]); err == nil && a.Is6() && !a.Is4In6() && publicIP(a) {
				out = append(out, guard.Match{Kind: KindIPv6, Start: i, End: j, Confidence: 0.8})
			}
		}
		i = j
	}
	return out
}

var nonPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "64:ff9b::/96", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16",
		"3fff::/20", "fc00::/7", "fe80::/10", "ff00::/8",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// publicIP: globally routable unicast, not documentation or private space.
func publicIP(a netip.Addr) bool {
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// ---- phone numbers ----

func phoneChar(c byte) bool {
	return isDigit(c) || c == ' ' || c == '-' || c == '.' || c == '(' || c == ')'
}

// phones finds international numbers (+CC ...) and national numbers in
// the shapes the numbering plans use: a trunk 0 with 10 or 11 digits,
// NANP (xxx) xxx-xxxx / xxx-xxx-xxxx / xxx.xxx.xxxx, Italian mobiles.
func phones(t string, out []guard.Match) []guard.Match {
	var buf [24]byte
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c == '+' || c == '(' || isDigit(c)) || !boundaryBefore(t, i) {
			continue
		}
		if c == '+' && (i+1 >= len(t) || !isDigit(t[i+1])) {
			continue
		}
		if c == '(' && (i+1 >= len(t) || !isDigit(t[i+1])) {
			continue
		}
		if i >= 2 && (t[i-1] == ' ' || t[i-1] == '-') && isDigit(t[i-2]) {
			continue // inside a longer group of numbers
		}
		j := i + 1
		prevSep := false
		for j < len(t) && phoneChar(t[j]) {
			sep := !isDigit(t[j])
			if sep && prevSep && !(t[j-1] == ')' && t[j] == ' ') && !(t[j-1] == ' ' && t[j] == '(') {
				break
			}
			prevSep = sep
			j++
		}
		for j > i && !isDigit(t[j-1]) {
			j--
		}
		cand := t[i:j]
		d := buf[:0]
		for k := 0; k < len(cand) && len(d) < len(buf); k++ {
			if isDigit(cand[k]) {
				d = append(d, cand[k])
			}
		}
		if boundaryAfter(t, j) && validPhone(cand, d) {
			out = append(out, guard.Match{Kind: KindPhone, Start: i, End: j, Confidence: 0.7})
			i = j
			continue
		}
		for i+1 < len(t) && isDigit(t[i+1]) {
			i++
		}
	}
	return out
}

func validPhone(cand string, d []byte) bool {
	n := len(d)
	if !balancedParens(cand) {
		return false
	}
	seps := strings.Count(cand, " ") + strings.Count(cand, "-") + strings.Count(cand, ".") + strings.Count(cand, "(")
	switch {
	case cand[0] == '+':
		return n >= 9 && n <= 15 && d[0] != '0' && (seps > 0 || n >= 11) && !strings.Contains(cand, ".")
	case cand[0] == '(':
		return (n == 10 || n == 11) && seps >= 2
	case d[0] == '0':
		return (n == 10 || n == 11 || n == 12 && seps > 0) && (seps > 0 || n == 11) && d[1] != '0' && uniformSeps(cand)
	case n == 10 && nanp(cand):
		return true
	case n == 11 && d[0] == '1' && len(cand) == 14 && (cand[1] == '-' || cand[1] == ' ' || cand[1] == '.') && nanp(cand[2:]):
		return true // 1-404-243-6675
	case n == 10 && d[0] == '3' && len(cand) == 11 && cand[3] == ' ' && allDigits(cand[:3]) && allDigits(cand[4:]):
		return true // Italian mobile: 3xx xxxxxxx
	}
	return false
}

func balancedParens(s string) bool {
	open := strings.Count(s, "(")
	return open == strings.Count(s, ")") && open <= 1
}

// uniformSeps rejects dotted national numbers, which are more often
// versions or amounts.
func uniformSeps(s string) bool { return !strings.Contains(s, ".") }

// nanp: xxx-xxx-xxxx or xxx.xxx.xxxx with area and exchange starting 2-9.
func nanp(s string) bool {
	if len(s) != 12 || s[3] != s[7] || (s[3] != '-' && s[3] != '.') {
		return false
	}
	if !allDigits(s[:3]) || !allDigits(s[4:7]) || !allDigits(s[8:]) {
		return false
	}
	return s[0] >= '2' && s[4] >= '2'
}
