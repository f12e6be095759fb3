package evals

import (
	"encoding/json"
	"fmt"
	"strings"
)

// This file is the Berkeley Function Calling Leaderboard's AST checker
// (bfcl_eval/eval_checker/ast_eval/ast_checker.py, Python cases), restated
// in Go so that a plan scores here exactly as it would there. Comments name
// the upstream function each part mirrors. Failures come back as reasons with
// the upstream error type as their code.

// bfclParam is one parameter's type in the checker's terms: the Python type
// names string, integer, float, boolean, array, dict, any (tuple counts as
// array, it compares as a list).
type bfclParam struct {
	typ  string
	item string // element type of arrays
}

type bfclFunc struct {
	name     string
	props    map[string]bfclParam
	required []string
}

// bfclTypeOf maps a JSON Schema type (as import-bfcl writes it) back to the
// checker's type name.
func bfclTypeOf(schema value) string {
	t, ok := schema.get("type")
	if !ok || t.k != kString {
		return "any"
	}
	switch t.s {
	case "integer":
		return "integer"
	case "number":
		return "float"
	case "string":
		return "string"
	case "boolean":
		return "boolean"
	case "object":
		return "dict"
	case "array":
		return "array"
	}
	return "any"
}

func bfclFuncOf(name string, inputSchema json.RawMessage) bfclFunc {
	f := bfclFunc{name: name, props: map[string]bfclParam{}}
	s, err := parseValue(inputSchema)
	if err != nil {
		return f
	}
	if props, ok := s.get("properties"); ok && props.k == kObject {
		for i, p := range props.keys {
			ps := props.vals[i]
			bp := bfclParam{typ: bfclTypeOf(ps)}
			if bp.typ == "array" {
				bp.item = "any"
				if items, ok := ps.get("items"); ok {
					bp.item = bfclTypeOf(items)
				}
			}
			f.props[p] = bp
		}
	}
	if req, ok := s.get("required"); ok && req.k == kList {
		for _, r := range req.list {
			if r.k == kString {
				f.required = append(f.required, r.s)
			}
		}
	}
	return f
}

// pyTypeName is Python's type(value).__name__ for a decoded JSON value.
func pyTypeName(v value) string {
	switch v.k {
	case kNull:
		return "NoneType"
	case kBool:
		return "bool"
	case kInt:
		return "int"
	case kFloat:
		return "float"
	case kString:
		return "str"
	case kList:
		return "list"
	case kObject:
		return "dict"
	}
	return "?"
}

// pyTypeFor is PYTHON_TYPE_MAPPING.
func pyTypeFor(t string) string {
	switch t {
	case "string", "any":
		return "str"
	case "integer":
		return "int"
	case "float":
		return "float"
	case "boolean":
		return "bool"
	case "array", "tuple":
		return "list"
	case "dict":
		return "dict"
	}
	return "str"
}

// readable type names for messages.
func plainType(py string) string {
	switch py {
	case "str":
		return "a string"
	case "int":
		return "an integer"
	case "float":
		return "a float"
	case "bool":
		return "a boolean"
	case "list":
		return "an array"
	case "dict":
		return "an object"
	case "NoneType":
		return "null"
	}
	return py
}

func isEmptyString(v value) bool { return v.k == kString && v.s == "" }

// acceptable returns a matcher's acceptable values in leaderboard form:
// "" stands for "may be omitted".
func (m *Matcher) acceptable() []value {
	var out []value
	if m.equals != nil {
		out = append(out, *m.equals)
	}
	out = append(out, m.oneOf...)
	if m.Optional {
		out = append(out, value{k: kString})
	}
	return out
}

// possibleAnswerType is get_possible_answer_type: the type of the first
// acceptable value that is not "".
func possibleAnswerType(pa []value) string {
	for _, a := range pa {
		if !isEmptyString(a) {
			return pyTypeName(a)
		}
	}
	return ""
}

type bfclVerdict struct {
	ok   bool
	code string
	msg  string
}

func bfclOK() bfclVerdict { return bfclVerdict{ok: true} }

// typeCheck is type_checker. It returns the verdict and whether the value
// is taken as a "variable" (the answer's type differs from the schema's).
func typeCheck(param string, v value, pa []value, desc, conv, nested string) (bfclVerdict, bool) {
	isVar := false
	paType := possibleAnswerType(pa)
	if paType != "" && paType != conv {
		isVar = true
	}
	nestedFailed := false
	if pyTypeName(v) == conv {
		if nested == "" {
			return bfclOK(), isVar
		}
		for _, item := range pa {
			flag := true
			if item.k == kList {
				for _, e := range v.list {
					if r, _ := typeCheck(param, e, item.list, nested, nested, ""); !r.ok {
						flag = false
						break
					}
				}
			}
			if flag {
				return bfclOK(), isVar
			}
		}
		nestedFailed = true
	}
	if paType != "" && pyTypeName(v) == paType {
		if nestedFailed {
			return bfclVerdict{code: "type_error:nested", msg: fmt.Sprintf("argument %s is %s, but its elements are not all %s", param, clipText(v.String(), 80), plainType(nested))}, true
		}
		return bfclOK(), true
	}
	if nestedFailed {
		return bfclVerdict{code: "type_error:nested", msg: fmt.Sprintf("argument %s is %s, but its elements are not all %s", param, clipText(v.String(), 80), plainType(nested))}, isVar
	}
	return bfclVerdict{code: "type_error:simple", msg: fmt.Sprintf("argument %s is %s (%s), expected %s (schema type %s)", param, plainType(pyTypeName(v)), clipText(v.String(), 80), plainType(conv), desc)}, isVar
}

const bfclNormNote = "strings compare ignoring case, spaces and , . / - _ * ^"

// stringCheck is string_checker.
func stringCheck(param string, v value, pa []value) bfclVerdict {
	got := bfclStandardize(v.s)
	for _, a := range pa {
		if a.k == kString && bfclStandardize(a.s) == got {
			return bfclOK()
		}
	}
	return bfclVerdict{code: "value_error:string", msg: fmt.Sprintf("argument %s is %s, expected one of %s (%s)", param, clipText(v.String(), 120), clipText(showList(pa), 200), bfclNormNote)}
}

// listCheck is list_checker: top-level strings are normalised on both sides,
// then the lists compare with Python's ==.
func listCheck(param string, v value, pa []value) bfclVerdict {
	got := value{k: kList, list: make([]value, len(v.list))}
	for i, e := range v.list {
		if e.k == kString {
			e = value{k: kString, s: bfclStandardize(e.s)}
		}
		got.list[i] = e
	}
	for _, a := range pa {
		var want value
		switch a.k {
		case kList:
			want = value{k: kList, list: make([]value, len(a.list))}
			for j, e := range a.list {
				if e.k == kString {
					e = value{k: kString, s: bfclStandardize(e.s)}
				}
				want.list[j] = e
			}
		case kString:
			// upstream iterates a string answer character by character
			// ("" thus accepts the empty list)
			want = value{k: kList}
			for _, r := range a.s {
				want.list = append(want.list, value{k: kString, s: bfclStandardize(string(r))})
			}
		default:
			continue
		}
		if pyEqual(got, want) {
			return bfclOK()
		}
	}
	return bfclVerdict{code: "value_error:list/tuple", msg: fmt.Sprintf("argument %s is %s, expected one of %s (%s)", param, clipText(v.String(), 120), clipText(showList(pa), 200), bfclNormNote)}
}

func stdValue(v value) value {
	if v.k == kString {
		return value{k: kString, s: bfclStandardize(v.s)}
	}
	return v
}

func asList(v value) []value {
	if v.k == kList {
		return v.list
	}
	return []value{v}
}

// dictCheck is dict_checker: each acceptable object maps keys to lists of
// acceptable values; string values are normalised.
func dictCheck(param string, v value, pa []value) bfclVerdict {
	res := bfclVerdict{code: "dict_checker:unclear", msg: fmt.Sprintf("argument %s is %s, but no object is acceptable there", param, clipText(v.String(), 120))}
	if v.k != kObject {
		return bfclVerdict{code: "type_error:simple", msg: fmt.Sprintf("argument %s is %s, expected an object", param, clipText(v.String(), 80))}
	}
	for _, a := range pa {
		if isEmptyString(a) {
			continue
		}
		if a.k != kObject {
			res = bfclVerdict{code: "dict_checker:unclear", msg: fmt.Sprintf("argument %s is %s, expected %s", param, clipText(v.String(), 120), clipText(a.String(), 120))}
			continue
		}
		flag := true
		for i, key := range v.keys {
			accs, ok := a.get(key)
			if !ok {
				res = bfclVerdict{code: "value_error:dict_key", msg: fmt.Sprintf("argument %s has key %q, which the expected object does not have (expected keys %s)", param, key, strings.Join(a.keys, ", "))}
				flag = false
				break
			}
			sv := stdValue(v.vals[i])
			var std []value
			for _, x := range asList(accs) {
				std = append(std, stdValue(x))
			}
			if !pyIn(sv, std) {
				res = bfclVerdict{code: "value_error:dict_value", msg: fmt.Sprintf("argument %s, key %s is %s, expected one of %s (%s)", param, key, clipText(v.vals[i].String(), 100), clipText(showList(asList(accs)), 160), bfclNormNote)}
				flag = false
				break
			}
		}
		if !flag {
			continue
		}
		for i, key := range a.keys {
			if _, ok := v.get(key); !ok && !pyIn(value{k: kString}, asList(a.vals[i])) {
				res = bfclVerdict{code: "value_error:dict_key", msg: fmt.Sprintf("argument %s lacks key %s (expected one of %s)", param, key, clipText(showList(asList(a.vals[i])), 160))}
				flag = false
				break
			}
		}
		if flag {
			return bfclOK()
		}
	}
	return res
}

// listDictCheck is list_dict_checker: a list of objects compared position
// by position.
func listDictCheck(param string, v value, pa []value) bfclVerdict {
	res := bfclVerdict{code: "list_dict_checker:unclear", msg: fmt.Sprintf("argument %s is %s, expected one of %s", param, clipText(v.String(), 120), clipText(showList(pa), 200))}
	for _, a := range pa {
		var items []value
		switch a.k {
		case kList:
			items = a.list
		case kString:
			if a.s != "" {
				continue
			}
		default:
			continue
		}
		if len(v.list) != len(items) {
			res = bfclVerdict{code: "value_error:list_dict_count", msg: fmt.Sprintf("argument %s has %d objects, expected %d", param, len(v.list), len(items))}
			continue
		}
		flag := true
		for i := range v.list {
			if r := dictCheck(fmt.Sprintf("%s[%d]", param, i), v.list[i], []value{items[i]}); !r.ok {
				res, flag = r, false
				break
			}
		}
		if flag {
			return bfclOK()
		}
	}
	return res
}

// bfclCall is one call of the plan as the checker sees it.
type bfclCall struct {
	tool string
	args value
}

// simpleFunctionCheck is simple_function_checker: one call against one
// expected call.
func simpleFunctionCheck(fn bfclFunc, call bfclCall, want *ExpectedAction) bfclVerdict {
	if call.tool != fn.name {
		return bfclVerdict{code: "simple_function_checker:wrong_func_name", msg: fmt.Sprintf("the call is to %s, expected %s", call.tool, fn.name)}
	}
	args := call.args
	for _, p := range fn.required {
		if _, ok := args.get(p); !ok {
			return bfclVerdict{code: "simple_function_checker:missing_required", msg: fmt.Sprintf("the call to %s lacks required argument %s", fn.name, p)}
		}
	}
	answers := map[string]*Matcher{}
	for i := range want.Args {
		answers[want.Args[i].Name] = &want.Args[i].Matcher
	}
	for i, param := range args.keys {
		v := args.vals[i]
		det, inSchema := fn.props[param]
		m, inAnswer := answers[param]
		if !inSchema || !inAnswer {
			why := "which the expected answer does not use: leave it out"
			if !inSchema {
				why = "which the tool does not define"
			}
			return bfclVerdict{code: "simple_function_checker:unexpected_param", msg: fmt.Sprintf("the call to %s passes argument %s, %s", fn.name, param, why)}
		}
		pa := m.acceptable()
		conv := pyTypeFor(det.typ)
		nested := ""
		if det.typ == "array" || det.typ == "tuple" {
			nested = pyTypeFor(det.item)
		}
		if det.typ == "float" && v.k == kInt {
			v = value{k: kFloat, f: v.float(), s: v.s}
		}
		tv, isVar := typeCheck(param, v, pa, det.typ, conv, nested)
		if !tv.ok {
			tv.msg = "in the call to " + fn.name + ", " + tv.msg
			return tv
		}
		if !isVar {
			var r bfclVerdict
			handled := true
			switch {
			case conv == "dict":
				r = dictCheck(param, v, pa)
			case conv == "list" && nested == "dict":
				r = listDictCheck(param, v, pa)
			case conv == "str":
				r = stringCheck(param, v, pa)
			case conv == "list":
				r = listCheck(param, v, pa)
			default:
				handled = false
			}
			if handled {
				if !r.ok {
					r.msg = "in the call to " + fn.name + ", " + r.msg
					return r
				}
				continue
			}
		}
		if !pyIn(v, pa) {
			return bfclVerdict{code: "value_error:others", msg: fmt.Sprintf("in the call to %s, argument %s is %s, expected one of %s", fn.name, param, clipText(call.args.vals[i].String(), 120), clipText(showList(pa), 200))}
		}
	}
	for _, a := range want.Args {
		if _, ok := args.get(a.Name); !ok && !pyIn(value{k: kString}, a.Matcher.acceptable()) {
			return bfclVerdict{code: "simple_function_checker:missing_optional", msg: fmt.Sprintf("the call to %s lacks argument %s, expected one of %s", fn.name, a.Name, clipText(showList(a.Matcher.acceptable()), 200))}
		}
	}
	return bfclOK()
}

// bfclCheck is ast_checker (and the irrelevance rule of the runner) for one
// case. funcs are the case's tools in dataset order.
func bfclCheck(rules string, funcs []bfclFunc, calls []bfclCall, want []ExpectedAction) bfclVerdict {
	find := func(name string) bfclFunc {
		for _, f := range funcs {
			if f.name == name {
				return f
			}
		}
		return bfclFunc{name: name, props: map[string]bfclParam{}}
	}
	wrongCount := func(code string) bfclVerdict {
		return bfclVerdict{code: code, msg: fmt.Sprintf("the plan has %d %s, the leaderboard expects exactly %d (%s)", len(calls), plural(len(calls), "call", "calls"), len(want), callNames(want))}
	}
	switch rules {
	case RulesBFCLIrrelevance:
		if len(calls) == 0 {
			return bfclOK()
		}
		names := make([]string, len(calls))
		for i, c := range calls {
			names[i] = c.tool
		}
		return bfclVerdict{code: "irrelevance_error:decoder_success", msg: fmt.Sprintf("none of the tools fits the request, so the right answer is to call nothing, but the plan calls %s", strings.Join(names, ", "))}
	case RulesBFCLParallel:
		// parallel_function_checker_no_order: greedy, in expected order.
		if len(calls) != len(want) {
			return wrongCount("parallel_function_checker_no_order:wrong_count")
		}
		matched := make([]bool, len(calls))
		for i := range want {
			fn := find(want[i].Tool)
			var errs []string
			found := false
			for j := range calls {
				if matched[j] {
					continue
				}
				r := simpleFunctionCheck(fn, calls[j], &want[i])
				if r.ok {
					matched[j] = true
					found = true
					break
				}
				errs = append(errs, fmt.Sprintf("call %d: %s", j+1, r.msg))
			}
			if !found {
				return bfclVerdict{code: "parallel_function_checker_no_order:cannot_find_match", msg: fmt.Sprintf("no remaining call matches expected call %d (%s): %s", i+1, want[i].Tool, strings.Join(errs, "; "))}
			}
		}
		return bfclOK()
	case RulesBFCLMultiple:
		if len(calls) != len(want) {
			return wrongCount("multiple_function_checker:wrong_count")
		}
		return simpleFunctionCheck(find(want[0].Tool), calls[0], &want[0])
	default: // simple
		if len(calls) != 1 {
			return wrongCount("simple_function_checker:wrong_count")
		}
		fn := find(want[0].Tool)
		if len(funcs) > 0 {
			fn = funcs[0]
		}
		return simpleFunctionCheck(fn, calls[0], &want[0])
	}
}

func callNames(want []ExpectedAction) string {
	if len(want) == 0 {
		return "no call"
	}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = w.Tool
	}
	return strings.Join(names, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
