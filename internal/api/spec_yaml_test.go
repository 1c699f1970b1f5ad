package api

import (
	"fmt"
	"testing"
)

// TestSpecNoStrayKeys: a description written unquoted in a flow mapping
// ({type: string, description: Why it failed (no answer, a refused ...)})
// is cut at its first comma, and the rest becomes a key with no value: the
// generated docs and SDK comments lose the sentence without an error. Every
// key but example and default must have a value.
func TestSpecNoStrayKeys(t *testing.T) {
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if x == nil && k != "example" && k != "default" {
					t.Errorf("spec/openapi.yaml %s/%s has no value: quote the text before it", path, k)
				}
				walk(x, path+"/"+k)
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(loadSpec(t), "")
}
