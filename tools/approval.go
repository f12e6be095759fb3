package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/docketrun/docket/plan"
)

// NeedsApproval applies the spec's approval rules to resolved (or planned)
// arguments: Always, or a top-level numeric argument above its limit
// (compared exactly as decimals, never through float64). reason says why, e.g.
// "amount 1200 > 100". A limited argument that is present but not a number (a
// reference that has not resolved yet, a non-numeric string, malformed JSON)
// needs approval too: its value cannot be shown to be within the limit. A
// string holding a decimal number ("1200.50") is compared like a number.
func NeedsApproval(s Spec, args json.RawMessage) (need bool, reason string) {
	var reasons []string
	if s.Approval.Always {
		reasons = append(reasons, "approval: always")
	}
	if len(s.Approval.Above) > 0 {
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			reasons = append(reasons, "arguments are not a JSON object, limits cannot be checked")
		} else {
			names := make([]string, 0, len(s.Approval.Above))
			for n := range s.Approval.Above {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if r := overLimit(n, obj, s.Approval.Above[n]); r != "" {
					reasons = append(reasons, r)
				}
			}
		}
	}
	return len(reasons) > 0, strings.Join(reasons, "; ")
}

func overLimit(name string, obj map[string]any, limit json.Number) string {
	v, ok := obj[name]
	if !ok || v == nil {
		return ""
	}
	lim, err := parseDecimal(string(limit))
	if err != nil {
		return fmt.Sprintf("%s: limit %q is not a number", name, limit)
	}
	var text string
	switch v := v.(type) {
	case json.Number:
		text = string(v)
	case string:
		if strings.Contains(v, "${") {
			return fmt.Sprintf("%s is not known until %s resolves (limit %s)", name, v, limit)
		}
		text = strings.TrimSpace(v)
	default:
		return fmt.Sprintf("%s is not a number (limit %s)", name, limit)
	}
	d, err := parseDecimal(text)
	if err != nil {
		return fmt.Sprintf("%s is not a number (limit %s)", name, limit)
	}
	if d.cmp(lim) > 0 {
		return fmt.Sprintf("%s %s > %s", name, text, limit)
	}
	return ""
}

// decimal is an exact decimal number: (-1)^neg * digits * 10^exp, digits
// without leading or trailing zeros ("" for zero).
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

const maxExponent = 1 << 40 // far beyond any real limit, far below overflow

// parseDecimal parses a JSON number exactly, without allocating for its
// exponent: "1e999999" is cheap.
func parseDecimal(s string) (decimal, error) {
	var d decimal
	bad := func() (decimal, error) { return decimal{}, fmt.Errorf("%q is not a JSON number", s) }
	i := 0
	if i < len(s) && s[i] == '-' {
		d.neg = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart := s[start:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return bad()
	}
	frac := ""
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac = s[fs:i]
		if frac == "" {
			return bad()
		}
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		es := i
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		ds := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if ds == i {
			return bad()
		}
		e, err := strconv.ParseInt(s[es:i], 10, 64)
		if err != nil || e > maxExponent || e < -maxExponent {
			return decimal{}, fmt.Errorf("%q: exponent out of range", s)
		}
		exp = e
	}
	if i != len(s) {
		return bad()
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	d.digits = trimmed
	d.exp = exp
	if d.digits == "" {
		d = decimal{}
	}
	return d, nil
}

func (d decimal) String() string {
	if d.digits == "" {
		return "0"
	}
	s := d.digits + "e" + strconv.FormatInt(d.exp, 10)
	if d.neg {
		s = "-" + s
	}
	return s
}

// cmp compares d and o exactly: -1, 0 or +1.
func (d decimal) cmp(o decimal) int {
	sign := func(x decimal) int {
		switch {
		case x.digits == "":
			return 0
		case x.neg:
			return -1
		}
		return 1
	}
	sd, so := sign(d), sign(o)
	if sd != so {
		if sd < so {
			return -1
		}
		return 1
	}
	if sd == 0 {
		return 0
	}
	m := d.cmpAbs(o)
	if sd < 0 {
		return -m
	}
	return m
}

func (d decimal) cmpAbs(o decimal) int {
	// magnitude: position of the most significant digit.
	md, mo := int64(len(d.digits))+d.exp, int64(len(o.digits))+o.exp
	if md != mo {
		if md < mo {
			return -1
		}
		return 1
	}
	a, b := d.digits, o.digits
	for len(a) < len(b) {
		a += "0"
	}
	for len(b) < len(a) {
		b += "0"
	}
	return strings.Compare(a, b)
}

// CompensationArgs builds the compensating call's arguments from the template
// (c.Args, a JSON object), the original action's resolved arguments (input) and
// its output. A string that is exactly "${input}", "${input.PATH}", "${output}"
// or "${output.PATH}" (PATH: dot-separated keys and array indexes) is replaced
// by that value, type preserved; any other string containing "${" is refused,
// as is a PATH that does not exist.
func CompensationArgs(c Compensation, input, output json.RawMessage) (json.RawMessage, error) {
	tmpl, err := DecodeJSON(c.Args)
	if err != nil {
		return nil, fmt.Errorf("compensation %q: args template: %v", c.Tool, err)
	}
	if _, ok := tmpl.(map[string]any); !ok {
		return nil, fmt.Errorf("compensation %q: args template must be a JSON object", c.Tool)
	}
	srcs := map[string]json.RawMessage{"input": input, "output": output}
	decoded := map[string]any{}
	out, err := fillTemplate(tmpl, "", func(where, root string, path []string) (any, error) {
		v, ok := decoded[root]
		if !ok {
			var err error
			if v, err = DecodeJSON(srcs[root]); err != nil {
				return nil, fmt.Errorf("the original action's %s is not valid JSON: %v", root, err)
			}
			decoded[root] = v
		}
		return walkPath(v, root, path)
	})
	if err != nil {
		return nil, fmt.Errorf("compensation %q: %w", c.Tool, err)
	}
	return json.Marshal(out)
}

// checkCompensationTemplate checks a template without data (for NewRegistry).
func checkCompensationTemplate(args json.RawMessage) error {
	tmpl, err := DecodeJSON(args)
	if err != nil {
		return err
	}
	if _, ok := tmpl.(map[string]any); !ok {
		return errors.New("must be a JSON object")
	}
	_, err = fillTemplate(tmpl, "", func(string, string, []string) (any, error) { return nil, nil })
	return err
}

type resolver func(where, root string, path []string) (any, error)

func fillTemplate(v any, where string, get resolver) (any, error) {
	switch v := v.(type) {
	case string:
		if !strings.Contains(v, "${") {
			return v, nil
		}
		root, path, err := parseTemplateRef(v)
		if err != nil {
			return nil, fmt.Errorf("at %s: %w", cmpOr(where, "/"), err)
		}
		x, err := get(where, root, path)
		if err != nil {
			return nil, fmt.Errorf("at %s: %w", cmpOr(where, "/"), err)
		}
		return x, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			y, err := fillTemplate(x, where+"/"+k, get)
			if err != nil {
				return nil, err
			}
			out[k] = y
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			y, err := fillTemplate(x, fmt.Sprintf("%s/%d", where, i), get)
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	}
	return v, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// parseTemplateRef parses a compensation (or MCP lookup) reference with
// plan's reference parser (plan.SplitRef, the one "${" grammar docket has):
// exactly "${input[.PATH]}" or "${output[.PATH]}". Errors wrap
// plan.ErrReference.
func parseTemplateRef(s string) (root string, path []string, err error) {
	parts, _, err := plan.SplitRef(s)
	if err != nil {
		return "", nil, fmt.Errorf(`%q: a string containing "${" must be exactly "${input.PATH}" or "${output.PATH}" (no interpolation): %w`, s, plan.ErrReference)
	}
	root = parts[0]
	if root != "input" && root != "output" {
		return "", nil, fmt.Errorf(`%q: must start with "input" or "output": %w`, s, plan.ErrReference)
	}
	for _, p := range parts[1:] {
		if p == "" {
			return "", nil, fmt.Errorf("%q: empty path segment: %w", s, plan.ErrReference)
		}
	}
	return root, parts[1:], nil
}

func walkPath(v any, root string, path []string) (any, error) {
	cur := v
	for i, p := range path {
		here := root + "." + strings.Join(path[:i+1], ".")
		switch c := cur.(type) {
		case map[string]any:
			x, ok := c[p]
			if !ok {
				return nil, fmt.Errorf("%s: no such field", here)
			}
			cur = x
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 || n >= len(c) {
				return nil, fmt.Errorf("%s: no such array index (length %d)", here, len(c))
			}
			cur = c[n]
		default:
			return nil, fmt.Errorf("%s: cannot index into %s", here, JSONKind(cur))
		}
	}
	return cur, nil
}

// Check verifies the compensation's args template without data: a JSON object
// whose strings containing "${" are exactly "${input[.PATH]}" or "${output[.PATH]}".
func (c Compensation) Check() error {
	return checkCompensationTemplate(c.Args)
}

// InputPaths lists the paths of the original arguments the template uses
// ("${input.to.iban}" gives ["to", "iban"]), for checking against a schema.
// It returns nil for a template that fails Check.
func (c Compensation) InputPaths() [][]string {
	tmpl, err := DecodeJSON(c.Args)
	if err != nil {
		return nil
	}
	var paths [][]string
	_, err = fillTemplate(tmpl, "", func(_, root string, path []string) (any, error) {
		if root == "input" && len(path) > 0 {
			paths = append(paths, path)
		}
		return nil, nil
	})
	if err != nil {
		return nil
	}
	return paths
}
