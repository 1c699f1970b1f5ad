package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/sandbox"
)

// decodeJSON reads a JSON object body of at most MaxJSONBody bytes into v,
// strictly: unknown fields, wrong types, invalid UTF-8 and trailing data
// are refused. An empty body is refused when required, and leaves v as is
// otherwise.
//
// Errors: payload_too_large over the limit; invalid_json when the body is
// not JSON (syntax, invalid UTF-8, trailing data); bad_request when it is
// JSON of the wrong shape (not an object, unknown field, wrong type).
func decodeJSON(r *http.Request, v any, required bool) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxJSONBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apierr.PayloadTooLarge("request body too large: the limit is 1 MiB")
		}
		return apierr.Wrap(apierr.CodeBadRequest, "read request body", err)
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		if required {
			return apierr.InvalidJSON("request body: empty, want a JSON object")
		}
		return nil
	}
	if !utf8.Valid(b) {
		return apierr.InvalidJSON("request body: not valid UTF-8")
	}
	if !json.Valid(trimmed) {
		// Find the position of the syntax error for the message.
		var raw any
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		err := dec.Decode(&raw)
		switch {
		case err == nil:
			return apierr.InvalidJSON("request body: trailing data after the JSON value")
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return apierr.InvalidJSON("request body: unexpected end of JSON input")
		default:
			return apierr.InvalidJSON("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if trimmed[0] != '{' {
		return apierr.BadRequest("request body: want a JSON object")
	}
	if err := checkKeys(trimmed, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			field := te.Field
			if field == "" {
				field = "value"
			}
			return apierr.BadRequest("request body: %s: want %s, got %s", field, jsonType(te.Type.String()), te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return apierr.BadRequest("request body: unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return apierr.BadRequest("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	return nil
}

// jsonType names a Go type the way a JSON caller thinks of it.
func jsonType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"), strings.HasPrefix(goType, "*int"):
		return "an integer"
	case goType == "string", goType == "*string":
		return "a string"
	case goType == "bool", goType == "*bool":
		return "a boolean"
	case strings.HasPrefix(goType, "[]"), strings.HasPrefix(goType, "*[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["):
		return "an object"
	}
	return "another type"
}

// queryInt parses an optional integer query parameter within [lo, hi].
// Not an integer is bad_request; out of range is validation_failed.
func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, apierr.BadRequest("query parameter %s: %q is not an integer", name, truncate(v, 64))
	}
	if n < lo || n > hi {
		return 0, apierr.Validation("query parameter %s: must be between %d and %d", name, lo, hi)
	}
	return n, nil
}

// queryBool parses an optional boolean query parameter.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, apierr.BadRequest("query parameter %s: %q is not a boolean", name, truncate(v, 64))
	}
	return b, nil
}

// checkPath validates a sandbox path from a request: absolute, valid UTF-8,
// no NUL or other control bytes, no "." or ".." element, at most 4096
// bytes. what names the parameter in messages.
func checkPath(what, p string) error {
	switch {
	case p == "":
		return apierr.BadRequest("%s is required", what)
	case len(p) > maxPath:
		return apierr.BadRequest("%s: longer than %d bytes", what, maxPath)
	case !utf8.ValidString(p):
		return apierr.BadRequest("%s: not valid UTF-8", what)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return apierr.BadRequest("%s: contains a NUL or control character", what)
	case !strings.HasPrefix(p, "/"):
		return apierr.BadRequest("%s: %q is not an absolute path", what, truncate(p, 256))
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return apierr.BadRequest("%s: %q has a %q element; give a clean absolute path", what, truncate(p, 256), el)
		}
	}
	return nil
}

// queryPath reads and validates the required "path" query parameter.
func queryPath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	return p, checkPath("path", p)
}

// checkUser validates a sandbox user name from a request ("" is the
// sandbox's user). '|' is refused too: presigned URL signatures rely on it.
func checkUser(what, u string) error {
	if u == "" {
		return nil
	}
	if sandbox.CheckUser(u) != nil { // the manager's rules, for sandboxes
		return apierr.Validation("%s: %q is not a valid user name", what, truncate(u, 64))
	}
	return nil
}

// truncate shortens s for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// checkKeys refuses top-level keys that encoding/json would accept although
// they are not the schema's: a different case ("Template") or a repeated
// key, whose last value would silently win.
func checkKeys(obj []byte, v any) error {
	known := map[string]bool{}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			known[name] = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return apierr.InvalidJSON("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return apierr.InvalidJSON("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		key, _ := tok.(string)
		switch {
		case !known[key]:
			return apierr.BadRequest("request body: unknown field %q", truncate(key, 64))
		case seen[key]:
			return apierr.BadRequest("request body: field %q given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return apierr.InvalidJSON("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	return nil
}
