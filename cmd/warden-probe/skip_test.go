//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestSkipIsNotAPass: a skipped check is written with "pass":false and
// "skip":true, and counts as a skip, not as a failure.
func TestSkipIsNotAPass(t *testing.T) {
	var buf bytes.Buffer
	r := &reporter{enc: json.NewEncoder(&buf)}
	r.skip(20, "sibling-ip", "no -sibling-ip")
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%s: %v", buf.Bytes(), err)
	}
	if got["pass"] != false || got["skip"] != true {
		t.Errorf("skip wrote %s, want \"pass\":false and \"skip\":true", buf.Bytes())
	}
	if r.skips != 1 || r.fails != 0 {
		t.Errorf("after one skip: %d skips, %d failures; want 1 and 0", r.skips, r.fails)
	}
}
