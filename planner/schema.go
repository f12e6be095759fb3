package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// nameMap maps registry names to the names the model sees and back
// (tools.WireNames: the rule docket mcp uses for MCP clients too).
type nameMap struct {
	toWire   map[string]string
	fromWire map[string]string
}

func mapNames(names []string) nameMap {
	m := nameMap{toWire: tools.WireNames(names), fromWire: make(map[string]string, len(names))}
	for n, w := range m.toWire {
		m.fromWire[w] = n
	}
	return m
}

// registryName maps a name from the model back. The model may also answer
// with the registry name itself when that is unambiguous.
func (m nameMap) registryName(wire string) (string, bool) {
	if n, ok := m.fromWire[wire]; ok {
		return n, true
	}
	if _, ok := m.toWire[wire]; ok { // not another tool's wire name: checked above
		return wire, true
	}
	if n := strings.TrimSpace(wire); n != wire && n != "" {
		return m.registryName(n)
	}
	for _, prefix := range namePrefixes {
		if n, ok := strings.CutPrefix(wire, prefix); ok && n != "" {
			return m.registryName(n)
		}
	}
	return "", false
}

// namePrefixes are namespaces some models put before a tool's name
// ("functions.send_email": gpt-oss and other models trained on OpenAI's
// harmony format; "default_api.": models trained on Gemini's).
var namePrefixes = []string{"functions.", "function.", "functions:", "default_api."}

// shape records, for one schema node, which object properties were optional
// in the original schema (and were made nullable and required for strict
// mode), so that a null the model sends there can be dropped. nil: nothing to
// drop anywhere below.
type shape struct {
	optional map[string]bool
	props    map[string]*shape
	items    *shape
}

// unsupported keywords make a schema non-strict: strict mode cannot express
// them, or expressing them would need null-dropping the planner cannot do
// unambiguously.
var unsupported = []string{
	"$ref", "$defs", "definitions", "$dynamicRef", "oneOf", "allOf", "not", "if", "then", "else",
	"patternProperties", "dependentRequired", "dependentSchemas", "dependencies",
	"unevaluatedProperties", "unevaluatedItems", "propertyNames", "prefixItems", "contains",
	"additionalItems",
}

// strictSchema converts an input schema (an object schema) to the strict form.
// ok is false when the schema cannot be made strict without changing its
// meaning; then the original is to be sent with strict: false.
func strictSchema(raw json.RawMessage) (out json.RawMessage, sh *shape, ok bool, err error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, nil, false, fmt.Errorf("decoding input schema: %w", err)
	}
	root, isObj := v.(map[string]any)
	if !isObj {
		return raw, nil, false, nil
	}
	delete(root, "$schema")
	delete(root, "$id")
	sh, ok = strictify(root)
	if !ok {
		return raw, nil, false, nil
	}
	out, err = marshalNoEscape(root)
	if err != nil {
		return nil, nil, false, err
	}
	return out, sh, true, nil
}

// strictify rewrites node in place. It returns the node's shape and whether
// the node could be made strict.
func strictify(node map[string]any) (*shape, bool) {
	for _, k := range unsupported {
		if _, has := node[k]; has {
			return nil, false
		}
	}
	if alts, has := node["anyOf"]; has {
		list, isList := alts.([]any)
		if !isList {
			return nil, false
		}
		for _, a := range list {
			m, isMap := a.(map[string]any)
			if !isMap {
				return nil, false
			}
			sh, ok := strictify(m)
			if !ok || sh != nil { // nulls inside a branch could not be dropped unambiguously
				return nil, false
			}
		}
	}
	types := typeSet(node["type"])
	_, hasProps := node["properties"]
	if types["object"] || hasProps {
		if ap, has := node["additionalProperties"]; has && ap != false {
			return nil, false
		}
		props, isMap := node["properties"].(map[string]any)
		if !isMap {
			if hasProps || node["additionalProperties"] != false {
				return nil, false // a free-form object: strict mode would forbid every key
			}
			props = map[string]any{}
			node["properties"] = props
		}
		req := map[string]bool{}
		if list, isList := node["required"].([]any); isList {
			for _, r := range list {
				if s, isStr := r.(string); isStr {
					req[s] = true
				}
			}
		} else if _, has := node["required"]; has {
			return nil, false
		}
		var sh shape
		keys := make([]string, 0, len(props))
		for k, pv := range props {
			pm, isMap := pv.(map[string]any)
			if !isMap {
				return nil, false
			}
			child, ok := strictify(pm)
			if !ok {
				return nil, false
			}
			if child != nil {
				if sh.props == nil {
					sh.props = map[string]*shape{}
				}
				sh.props[k] = child
			}
			if !req[k] {
				props[k] = nullable(pm)
				if sh.optional == nil {
					sh.optional = map[string]bool{}
				}
				sh.optional[k] = true
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		all := make([]any, len(keys))
		for i, k := range keys {
			all[i] = k
		}
		node["required"] = all
		node["additionalProperties"] = false
		if sh.optional == nil && sh.props == nil {
			return nil, true
		}
		return &sh, true
	}
	if types["array"] {
		items, has := node["items"]
		if !has {
			return nil, false
		}
		im, isMap := items.(map[string]any)
		if !isMap {
			return nil, false
		}
		child, ok := strictify(im)
		if !ok {
			return nil, false
		}
		if child != nil {
			return &shape{items: child}, true
		}
		return nil, true
	}
	if _, has := node["items"]; has {
		return nil, false // items without "type": "array" is ambiguous
	}
	return nil, true
}

func typeSet(t any) map[string]bool {
	set := map[string]bool{}
	switch t := t.(type) {
	case string:
		set[t] = true
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok {
				set[s] = true
			}
		}
	}
	return set
}

// nullable returns a schema accepting everything s accepts, and null.
func nullable(s map[string]any) map[string]any {
	if enum, has := s["enum"].([]any); has {
		if !slices.Contains(enum, any(nil)) {
			s["enum"] = append(enum, nil)
		}
		if _, hasType := s["type"]; hasType {
			s["type"] = withNull(s["type"])
		}
		return s
	}
	_, hasConst := s["const"]
	_, hasAnyOf := s["anyOf"]
	if t, has := s["type"]; has && !hasConst && !hasAnyOf {
		s["type"] = withNull(t)
		return s
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

func withNull(t any) any {
	switch t := t.(type) {
	case string:
		if t == "null" {
			return t
		}
		return []any{t, "null"}
	case []any:
		if slices.Contains(t, any("null")) {
			return t
		}
		return append(t, "null")
	}
	return t
}

// normalizeArgs turns the model's argument text into the recorded form:
// compact JSON with the nulls of optional properties removed, and lists its
// references. The text must be one JSON object that plan's strict scanner
// accepts (no duplicate keys, no number beyond ±2^53, no string containing
// "${" that is not exactly one reference).
func normalizeArgs(text string, sh *shape) (json.RawMessage, []plan.Ref, error) {
	raw := []byte(strings.TrimSpace(text))
	if len(raw) == 0 {
		raw = []byte("{}") // some servers send "" for a call without arguments
	}
	if raw[0] != '{' {
		if !json.Valid(raw) {
			return nil, nil, fmt.Errorf("arguments are not valid JSON: %s", clip(string(raw), 200))
		}
		return nil, nil, fmt.Errorf("arguments must be a JSON object, got %s", clip(string(raw), 80))
	}
	refs, err := plan.Refs(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments %s: %w", clip(string(raw), 200), err)
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if sh == nil || !bytes.Contains(raw, []byte("null")) {
		if err := json.Compact(&buf, raw); err != nil {
			return nil, nil, fmt.Errorf("arguments are not valid JSON: %w", err)
		}
		return buf.Bytes(), refs, nil
	}
	d := nullDropper{src: raw, out: buf.Bytes()}
	d.value(sh)
	return d.out, refs, nil
}

// nullDropper copies one well-formed JSON value (plan.Refs checked it)
// compactly, leaving out the object members whose value is null and whose
// key was optional in the original schema. Everything else is kept byte for
// byte, in order: numbers keep their spelling, strings their escapes.
type nullDropper struct {
	src []byte
	i   int
	out []byte
}

func (d *nullDropper) ws() {
	for d.i < len(d.src) {
		switch d.src[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *nullDropper) value(sh *shape) {
	d.ws()
	if d.i >= len(d.src) {
		return
	}
	switch d.src[d.i] {
	case '{':
		d.object(sh)
	case '[':
		d.array(sh)
	case '"':
		start := d.i
		d.skipString()
		d.out = append(d.out, d.src[start:d.i]...)
	default:
		start := d.i
		for d.i < len(d.src) {
			c := d.src[d.i]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			d.i++
		}
		d.out = append(d.out, d.src[start:d.i]...)
	}
}

func (d *nullDropper) skipString() {
	d.i++ // opening quote
	for d.i < len(d.src) {
		switch d.src[d.i] {
		case '\\':
			d.i += 2
		case '"':
			d.i++
			return
		default:
			d.i++
		}
	}
}

func (d *nullDropper) object(sh *shape) {
	d.i++
	d.out = append(d.out, '{')
	first := true
	for {
		d.ws()
		if d.i >= len(d.src) {
			return
		}
		if d.src[d.i] == '}' {
			d.i++
			break
		}
		if d.src[d.i] == ',' {
			d.i++
			continue
		}
		start := d.i
		d.skipString()
		keyRaw := d.src[start:min(d.i, len(d.src))]
		d.ws()
		if d.i < len(d.src) && d.src[d.i] == ':' {
			d.i++
		}
		d.ws()
		var child *shape
		if sh != nil && len(keyRaw) >= 2 {
			key := keyName(keyRaw)
			if sh.optional[key] && bytes.HasPrefix(d.src[d.i:], []byte("null")) {
				d.i += len("null")
				continue
			}
			child = sh.props[key]
		}
		if !first {
			d.out = append(d.out, ',')
		}
		first = false
		d.out = append(d.out, keyRaw...)
		d.out = append(d.out, ':')
		d.value(child)
	}
	d.out = append(d.out, '}')
}

func (d *nullDropper) array(sh *shape) {
	d.i++
	d.out = append(d.out, '[')
	var items *shape
	if sh != nil {
		items = sh.items
	}
	first := true
	for {
		d.ws()
		if d.i >= len(d.src) {
			return
		}
		if d.src[d.i] == ']' {
			d.i++
			break
		}
		if d.src[d.i] == ',' {
			d.i++
			continue
		}
		if !first {
			d.out = append(d.out, ',')
		}
		first = false
		d.value(items)
	}
	d.out = append(d.out, ']')
}

// keyName is the text of a quoted JSON key.
func keyName(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func marshalNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
