package mcpgw

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf16"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Pinning: an upstream tool's definition is what the model reads and
// obeys, so the gateway serves only definitions an admin approved. A
// definition is identified by the hex SHA-256 of its canonical JSON
// (RFC 8785: object keys sorted, no insignificant white space, numbers as
// ECMAScript prints them, strings with the minimal escapes) of {name,
// title, description, inputSchema, outputSchema, annotations}: a new tool
// or a changed one has a hash no admin approved, and is not served.

// pinnedFields is the part of a tool definition that is hashed and
// stored.
type pinnedFields struct {
	Name         string               `json:"name"`
	Title        string               `json:"title,omitempty"`
	Description  string               `json:"description,omitempty"`
	InputSchema  any                  `json:"inputSchema,omitempty"`
	OutputSchema any                  `json:"outputSchema,omitempty"`
	Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`
}

// ToolDefinition returns the canonical definition of t (the bytes a pin
// stores) and its hash.
func ToolDefinition(t *mcp.Tool) (def json.RawMessage, hash string, err error) {
	b, err := json.Marshal(pinnedFields{Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations})
	if err != nil {
		return nil, "", fmt.Errorf("tool %q: %w", t.Name, err)
	}
	def, err = Canonical(b)
	if err != nil {
		return nil, "", fmt.Errorf("tool %q: %w", t.Name, err)
	}
	sum := sha256.Sum256(def)
	return def, hex.EncodeToString(sum[:]), nil
}

// toolFromDefinition is the tool a stored (approved) definition
// describes.
func toolFromDefinition(def json.RawMessage) (*mcp.Tool, error) {
	var f struct {
		Name         string               `json:"name"`
		Title        string               `json:"title"`
		Description  string               `json:"description"`
		InputSchema  json.RawMessage      `json:"inputSchema"`
		OutputSchema json.RawMessage      `json:"outputSchema"`
		Annotations  *mcp.ToolAnnotations `json:"annotations"`
	}
	if err := json.Unmarshal(def, &f); err != nil {
		return nil, fmt.Errorf("pinned definition: %w", err)
	}
	t := &mcp.Tool{Name: f.Name, Title: f.Title, Description: f.Description, Annotations: f.Annotations}
	if len(f.InputSchema) > 0 {
		t.InputSchema = f.InputSchema
	}
	if len(f.OutputSchema) > 0 {
		t.OutputSchema = f.OutputSchema
	}
	return t, nil
}

// Canonical rewrites a JSON document in RFC 8785 canonical form: object
// members sorted by the UTF-16 code units of their names, no white
// space, strings with only the required escapes, numbers as ECMAScript
// prints them (Go's encoder prints float64 that way).
func Canonical(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("canonical json: trailing data")
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return buf.Bytes(), nil
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case float64:
		n, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(n)
	case string:
		writeCanonicalString(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, c string) int { return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(c))) })
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonicalString(b, k)
			b.WriteByte(':')
			if err := writeCanonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("unexpected %T", v)
	}
	return nil
}

func writeCanonicalString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[r>>4])
				b.WriteByte(hexDigits[r&0xf])
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
