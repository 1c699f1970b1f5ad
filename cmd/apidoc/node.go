package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// get returns the value of key in mapping node n, or nil.
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// str returns the scalar value of key in n, or "".
func str(n *yaml.Node, key string) string {
	v := get(n, key)
	if v == nil || v.Kind != yaml.ScalarNode {
		return ""
	}
	return v.Value
}

// pairs calls fn for each key and value of mapping node n, in document order.
func pairs(n *yaml.Node, fn func(key string, val *yaml.Node)) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		fn(n.Content[i].Value, n.Content[i+1])
	}
}

// items returns the elements of sequence node n.
func items(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// strings returns the scalar elements of sequence node n.
func scalars(n *yaml.Node) []string {
	var out []string
	for _, it := range items(n) {
		out = append(out, it.Value)
	}
	return out
}

// resolver follows local JSON-pointer references ("#/components/...") in one document.
type resolver struct{ root *yaml.Node }

// lookup returns the node that ref points at.
func (r resolver) lookup(ref string) (*yaml.Node, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("reference %q: only local references are supported", ref)
	}
	n := r.root
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n.Kind {
		case yaml.MappingNode:
			n = get(n, tok)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				n = nil
			} else {
				n = n.Content[i]
			}
		default:
			n = nil
		}
		if n == nil {
			return nil, fmt.Errorf("reference %q does not resolve", ref)
		}
	}
	return n, nil
}

// deref follows $ref chains from n and returns the node finally pointed at.
func (r resolver) deref(n *yaml.Node) (*yaml.Node, error) {
	for i := 0; n != nil && i < 16; i++ {
		ref := str(n, "$ref")
		if ref == "" {
			return n, nil
		}
		next, err := r.lookup(ref)
		if err != nil {
			return nil, err
		}
		n = next
	}
	if n == nil {
		return nil, nil
	}
	return nil, fmt.Errorf("reference chain too long at line %d", n.Line)
}

// refName returns the last element of n's $ref, or "" when n is not a reference.
func refName(n *yaml.Node) string {
	ref := str(n, "$ref")
	if ref == "" {
		return ""
	}
	return ref[strings.LastIndex(ref, "/")+1:]
}

// toJSON writes n as compact JSON, keeping the order of mapping keys.
func toJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return toJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return toJSON(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, n.Content[i].Value)
			buf.WriteByte(':')
			if err := toJSON(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := toJSON(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			buf.WriteString("null")
		case "!!bool", "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			b, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			buf.Write(b)
		default:
			writeString(buf, n.Value)
		}
	default:
		return fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
	}
	return nil
}

// writeString writes s as a JSON string without escaping HTML characters.
func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

// prettyJSON renders n as indented JSON.
func prettyJSON(n *yaml.Node) (string, error) {
	var compact, out bytes.Buffer
	if err := toJSON(&compact, n); err != nil {
		return "", err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return "", err
	}
	return out.String(), nil
}

// compactJSON renders n as one line of JSON.
func compactJSON(n *yaml.Node) (string, error) {
	var buf bytes.Buffer
	if err := toJSON(&buf, n); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// Constructors for synthesized example nodes.

func scalarNode(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func seqNode(elems ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: elems}
}

func addPair(m *yaml.Node, key string, val *yaml.Node) {
	m.Content = append(m.Content, scalarNode("!!str", key), val)
}
