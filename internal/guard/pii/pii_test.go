package pii

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/guard"
)

func kinds(in guard.Input) []string {
	var ks []string
	for _, m := range New().Detect(in, nil) {
		ks = append(ks, m.Kind+":"+in.Text[m.Start:m.End])
	}
	return ks
}

func TestValidatedKinds(t *testing.T) {
	cases := []struct {
		in   string
		key  string
		want string // "" = nothing
	}{
		{"card 4111 1111 1111 1111 ok", "", "credit_card:4111 1111 1111 1111"},
		{"card 4111 1111 1111 1112 ok", "", ""}, // Luhn fails
		{"ref 9799256275230", "", ""},           // ISBN, no card prefix
		{"IBAN DE89 3704 0044 0532 0130 00.", "", "iban:DE89 3704 0044 0532 0130 00"},
		{"IBAN DE88 3704 0044 0532 0130 00", "", ""}, // mod-97 fails
		{"GB82WEST12345698765432", "", "iban:GB82WEST12345698765432"},
		{"SSN 536-90-4399", "", "us_ssn:536-90-4399"},
		{"SSN 666-90-4399", "", ""},
		{"id 536904399", "", ""},                 // bare, no SSN context
		{"536904399", "ssn", "us_ssn:536904399"}, // a member named ssn
		{"mail jane.roe@harborline.io today", "", "email:jane.roe@harborline.io"},
		{"mail user@example.com", "", ""},
		{"from 81.2.69.160", "", "ipv4:81.2.69.160"},
		{"bind 10.1.2.3", "", ""},
		{"build 4.1.6.2", "", ""},
		{"src 2a01:4f8:c17:1::5", "", "ipv6:2a01:4f8:c17:1::5"},
		{"doc 2001:db8::1", "", ""},
		{"MAC 00:1A:2B:3C:4D:5E", "", ""},
		{"call +44 20 7946 0958", "", "phone:+44 20 7946 0958"},
		{"call (404) 308-7454", "", "phone:(404) 308-7454"},
		{"call 06 17 04 77 89", "", "phone:06 17 04 77 89"},
		{"batch 83 61 12 91 30 41 74", "", ""},
		{"at 2025-02-15 18:08:44", "", ""},
	}
	for _, c := range cases {
		got := kinds(guard.Input{Text: c.in, Key: c.key})
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%q: unexpected %v", c.in, got)
		case c.want != "" && (len(got) != 1 || got[0] != c.want):
			t.Errorf("%q: got %v, want [%s]", c.in, got, c.want)
		}
	}
}
