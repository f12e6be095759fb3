package evals

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"github.com/docketrun/docket/plan"
)

// Matcher says which values of one argument are right. In JSON a matcher is
// either a plain value (string, number, boolean, null or array: it must be
// equal) or an object with these keys:
//
//	equals     the value must equal this (numbers compare by value: 1 = 1.0)
//	one_of     the value must equal one of these
//	number     the value must be a number within tolerance of this
//	tolerance  absolute tolerance for number (default 0)
//	normalize  string comparison after normalising both sides: a list of
//	           "case" (lower-case), "space" (trim, collapse runs of white space),
//	           "punct" (drop punctuation and symbols), "bfcl" (the leaderboard's
//	           rule: lower-case, drop spaces and , . / - _ * ^, ' as ")
//	pattern    the value must be a string matching this regular expression (whole string)
//	ref        the value must be a reference to the output of the plan action
//	           that matches this expected action: "e1" (any path) or
//	           "e1.output.id" (that exact path)
//	any        true: any value, as long as the argument is present
//	optional   true: the argument may be left out (otherwise it is required)
//
// An object value is only ever compared through equals or one_of.
type Matcher struct {
	Equals    json.RawMessage   `json:"equals,omitempty"`
	OneOf     []json.RawMessage `json:"one_of,omitempty"`
	Number    *json.Number      `json:"number,omitempty"`
	Tolerance *json.Number      `json:"tolerance,omitempty"`
	Normalize []string          `json:"normalize,omitempty"`
	Pattern   string            `json:"pattern,omitempty"`
	Ref       string            `json:"ref,omitempty"`
	Any       bool              `json:"any,omitempty"`
	Optional  bool              `json:"optional,omitempty"`

	// decoded forms, filled by UnmarshalJSON
	equals *value
	oneOf  []value
	num    *big.Rat
	tol    *big.Rat
	re     *regexp.Regexp
}

type matcherJSON struct {
	Equals    json.RawMessage   `json:"equals,omitempty"`
	OneOf     []json.RawMessage `json:"one_of,omitempty"`
	Number    *json.Number      `json:"number,omitempty"`
	Tolerance *json.Number      `json:"tolerance,omitempty"`
	Normalize []string          `json:"normalize,omitempty"`
	Pattern   string            `json:"pattern,omitempty"`
	Ref       string            `json:"ref,omitempty"`
	Any       bool              `json:"any,omitempty"`
	Optional  bool              `json:"optional,omitempty"`
}

// MarshalJSON writes the matcher in its object form.
func (m Matcher) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(matcherJSON{m.Equals, m.OneOf, m.Number, m.Tolerance, m.Normalize, m.Pattern, m.Ref, m.Any, m.Optional})
	if err != nil || m.OneOf == nil || len(m.OneOf) != 0 {
		return b, err
	}
	// an empty one_of (nothing is right) must survive a round trip
	if len(b) == 2 {
		return []byte(`{"one_of":[]}`), nil
	}
	return append([]byte(`{"one_of":[],`), b[1:]...), nil
}

// UnmarshalJSON decodes a matcher strictly: unknown keys and contradictory
// combinations are refused.
func (m *Matcher) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return fmt.Errorf("empty matcher")
	}
	if data[0] != '{' {
		v, err := parseValue(data)
		if err != nil {
			return fmt.Errorf("matcher value: %w", err)
		}
		*m = Matcher{Equals: append(json.RawMessage(nil), data...), equals: &v}
		return nil
	}
	var j matcherJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		msg := jsonErrMsg(err)
		if strings.HasPrefix(msg, "unknown field") {
			msg = "unknown matcher key " + strings.TrimPrefix(msg, "unknown field ") + " (matchers take " + matcherNames + "; to expect an object value use {\"equals\": {...}})"
		}
		return fmt.Errorf("%s", msg)
	}
	*m = Matcher{Equals: j.Equals, OneOf: j.OneOf, Number: j.Number, Tolerance: j.Tolerance, Normalize: j.Normalize, Pattern: j.Pattern, Ref: j.Ref, Any: j.Any, Optional: j.Optional}
	kinds := 0
	if j.Equals != nil {
		kinds++
		v, err := parseValue(j.Equals)
		if err != nil {
			return fmt.Errorf("equals: %w", err)
		}
		m.equals = &v
	}
	if j.OneOf != nil {
		kinds++
		m.oneOf = []value{} // empty: no value is right (leaderboard data has such answers)
		for i, raw := range j.OneOf {
			v, err := parseValue(raw)
			if err != nil {
				return fmt.Errorf("one_of[%d]: %w", i, err)
			}
			m.oneOf = append(m.oneOf, v)
		}
	}
	if j.Number != nil {
		kinds++
		r, ok := new(big.Rat).SetString(string(*j.Number))
		if !ok {
			return fmt.Errorf("number %s is not a number", *j.Number)
		}
		m.num = r
	}
	if j.Tolerance != nil {
		if j.Number == nil {
			return fmt.Errorf("tolerance needs number")
		}
		r, ok := new(big.Rat).SetString(string(*j.Tolerance))
		if !ok || r.Sign() < 0 {
			return fmt.Errorf("tolerance %s must be a number ≥ 0", *j.Tolerance)
		}
		m.tol = r
	}
	if j.Pattern != "" {
		kinds++
		re, err := regexp.Compile(`^(?:` + j.Pattern + `)$`)
		if err != nil {
			return fmt.Errorf("pattern: %v", err)
		}
		m.re = re
	}
	if j.Ref != "" {
		kinds++
		if err := checkRefMatcher(j.Ref); err != nil {
			return err
		}
	}
	if j.Any {
		kinds++
	}
	if kinds > 1 {
		return fmt.Errorf("a matcher takes one of equals, one_of, number, pattern, ref, any")
	}
	if kinds == 0 && !j.Optional {
		return fmt.Errorf("empty matcher: say what is right (%s)", matcherNames)
	}
	for _, n := range j.Normalize {
		switch n {
		case "case", "space", "punct", "bfcl":
		default:
			return fmt.Errorf("normalize: unknown rule %q (want case, space, punct or bfcl)", n)
		}
	}
	if len(j.Normalize) > 0 && m.equals == nil && m.oneOf == nil {
		return fmt.Errorf("normalize applies to equals or one_of")
	}
	return nil
}

func checkRefMatcher(ref string) error {
	id, path, hasPath := strings.Cut(ref, ".")
	if id == "" {
		return fmt.Errorf("ref %q: want an expected action id, optionally followed by .output.PATH", ref)
	}
	if hasPath && path != "output" && !strings.HasPrefix(path, "output.") {
		return fmt.Errorf("ref %q: after the action id comes .output or .output.PATH", ref)
	}
	return nil
}

// ParseMatcher decodes one matcher (for tests and tools).
func ParseMatcher(data []byte) (Matcher, error) {
	var m Matcher
	err := m.UnmarshalJSON(data)
	return m, err
}

// argCheck is the outcome of matching one argument.
type argCheck struct {
	ok  bool
	msg string // why not, for a person
}

// refTarget resolves a ref matcher's expected action id to the plan action id
// it was matched to ("" when that expected action has no match).
type refTarget func(expectedID string) (planID string, tool string)

// match checks one present argument value. raw is the plan's JSON.
func (m *Matcher) match(name string, v value, targets refTarget) argCheck {
	if ref, isRef := refOf(v); isRef && m.Ref == "" && !m.Any {
		return argCheck{msg: fmt.Sprintf("argument %s is a reference to %s, expected %s", name, ref.Text, m.describe())}
	}
	switch {
	case m.Any:
		return argCheck{ok: true}
	case m.equals != nil:
		if eqNorm(v, *m.equals, m.Normalize) {
			return argCheck{ok: true}
		}
		return argCheck{msg: fmt.Sprintf("argument %s is %s, expected %s", name, clipText(v.String(), 120), m.describe())}
	case m.oneOf != nil:
		for _, o := range m.oneOf {
			if eqNorm(v, o, m.Normalize) {
				return argCheck{ok: true}
			}
		}
		return argCheck{msg: fmt.Sprintf("argument %s is %s, expected %s", name, clipText(v.String(), 120), m.describe())}
	case m.num != nil:
		r, ok := v.rat()
		if !ok || v.k == kBool {
			return argCheck{msg: fmt.Sprintf("argument %s is %s, expected a number: %s", name, clipText(v.String(), 60), m.describe())}
		}
		diff := new(big.Rat).Sub(r, m.num)
		diff.Abs(diff)
		tol := m.tol
		if tol == nil {
			tol = new(big.Rat)
		}
		if diff.Cmp(tol) <= 0 {
			return argCheck{ok: true}
		}
		return argCheck{msg: fmt.Sprintf("argument %s is %s, expected %s", name, v.String(), m.describe())}
	case m.re != nil:
		if v.k != kString {
			return argCheck{msg: fmt.Sprintf("argument %s is %s, expected a string matching %s", name, clipText(v.String(), 60), m.Pattern)}
		}
		if m.re.MatchString(v.s) {
			return argCheck{ok: true}
		}
		return argCheck{msg: fmt.Sprintf("argument %s is %s, expected a string matching %s", name, clipText(v.String(), 120), m.Pattern)}
	case m.Ref != "":
		ref, isRef := refOf(v)
		wantID, wantPath, _ := strings.Cut(m.Ref, ".")
		planID, tool := targets(wantID)
		if !isRef {
			return argCheck{msg: fmt.Sprintf("argument %s is %s, expected a reference to the output of the %s action (%s) so the value comes from it", name, clipText(v.String(), 60), describeTool(tool), m.Ref)}
		}
		if planID == "" {
			return argCheck{msg: fmt.Sprintf("argument %s refers to %s, but the plan has no action matching expected action %s", name, ref.Text, wantID)}
		}
		if ref.Action != planID {
			return argCheck{msg: fmt.Sprintf("argument %s refers to %s, expected a reference to action %s (the %s call)", name, ref.Text, planID, describeTool(tool))}
		}
		if wantPath != "" {
			got := strings.Join(append([]string{"output"}, ref.Path...), ".")
			if got != wantPath {
				return argCheck{msg: fmt.Sprintf("argument %s refers to %s, expected ${%s.%s}", name, ref.Text, planID, wantPath)}
			}
		}
		return argCheck{ok: true}
	}
	// optional only: any value is fine
	return argCheck{ok: true}
}

func describeTool(t string) string {
	if t == "" {
		return "expected"
	}
	return t
}

// refOf reports whether v is a plan reference string.
func refOf(v value) (plan.Ref, bool) {
	if v.k != kString || !strings.Contains(v.s, "${") {
		return plan.Ref{}, false
	}
	r, ok, err := plan.ParseRef(v.s)
	if err != nil || !ok {
		return plan.Ref{}, false
	}
	return r, true
}

// describe renders what the matcher accepts, for a person.
func (m *Matcher) describe() string {
	norm := ""
	if len(m.Normalize) > 0 {
		norm = " (compared after normalising " + strings.Join(m.Normalize, ", ") + ")"
	}
	switch {
	case m.Any:
		return "any value"
	case m.equals != nil:
		return clipText(m.equals.String(), 120) + norm
	case m.oneOf != nil && len(m.oneOf) == 0:
		return "no value at all (the expected answer lists no acceptable value)"
	case m.oneOf != nil:
		return "one of " + clipText(showList(m.oneOf), 200) + norm
	case m.num != nil:
		if m.tol != nil && m.tol.Sign() > 0 {
			return fmt.Sprintf("%s ± %s", *m.Number, *m.Tolerance)
		}
		return string(*m.Number)
	case m.re != nil:
		return "a string matching " + m.Pattern
	case m.Ref != "":
		return "a reference to " + m.Ref
	}
	return "any value (optional)"
}

// eqNorm compares like pyEqual, normalising strings (also inside arrays and
// objects) with the rules given.
func eqNorm(a, b value, rules []string) bool {
	if len(rules) == 0 {
		return pyEqual(a, b)
	}
	if a.isNumber() && b.isNumber() {
		return numEqual(a, b)
	}
	if a.k != b.k {
		return false
	}
	switch a.k {
	case kString:
		return normalize(a.s, rules) == normalize(b.s, rules)
	case kList:
		if len(a.list) != len(b.list) {
			return false
		}
		for i := range a.list {
			if !eqNorm(a.list[i], b.list[i], rules) {
				return false
			}
		}
		return true
	case kObject:
		if len(a.keys) != len(b.keys) {
			return false
		}
		for i, k := range a.keys {
			bv, ok := b.get(k)
			if !ok || !eqNorm(a.vals[i], bv, rules) {
				return false
			}
		}
		return true
	}
	return pyEqual(a, b)
}

func normalize(s string, rules []string) string {
	for _, r := range rules {
		switch r {
		case "case":
			s = strings.ToLower(s)
		case "space":
			s = strings.Join(strings.Fields(s), " ")
		case "punct":
			s = strings.Map(func(r rune) rune {
				if unicode.IsPunct(r) || unicode.IsSymbol(r) {
					return -1
				}
				return r
			}, s)
		case "bfcl":
			s = bfclStandardize(s)
		}
	}
	return s
}

var bfclStripper = sync.OnceValue(func() *strings.Replacer {
	var pairs []string
	for _, c := range []string{" ", ",", ".", "/", "-", "_", "*", "^"} {
		pairs = append(pairs, c, "")
	}
	pairs = append(pairs, "'", `"`)
	return strings.NewReplacer(pairs...)
})

// bfclStandardize is the leaderboard's string normalisation: drop spaces and
// the characters , . / - _ * ^, lower-case, and treat ' as ".
func bfclStandardize(s string) string {
	return strings.ToLower(bfclStripper().Replace(s))
}
