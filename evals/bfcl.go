package evals

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// BFCLCategory derives the leaderboard category from a data file name:
// "BFCL_v4_live_simple.json" → "live_simple" (".gz" allowed).
func BFCLCategory(path string) string {
	base := filepath.Base(path)
	base = strings.TrimSuffix(base, ".gz")
	base = strings.TrimSuffix(base, ".json")
	base = strings.TrimSuffix(base, ".jsonl")
	if i := strings.Index(base, "BFCL_v"); i >= 0 {
		rest := base[i+len("BFCL_v"):]
		if _, cat, ok := strings.Cut(rest, "_"); ok {
			return cat
		}
	}
	return base
}

// BFCLRules returns the checker the leaderboard applies to a category (the
// same substring rules as upstream's ast_checker), or an error for the
// categories this importer does not handle.
func BFCLRules(category string) (string, error) {
	c := strings.ToLower(category)
	switch {
	case strings.Contains(c, "multi_turn"), strings.Contains(c, "java"), strings.Contains(c, "js"),
		strings.Contains(c, "memory"), strings.Contains(c, "web_search"), strings.Contains(c, "format_sensitivity"):
		return "", fmt.Errorf("category %q is not supported: only the single-turn Python categories (simple, multiple, parallel, parallel_multiple, irrelevance and their live_ versions) are", category)
	case strings.Contains(c, "irrelevance"):
		return RulesBFCLIrrelevance, nil
	case strings.Contains(c, "relevance"):
		return "", fmt.Errorf("category %q is not supported: relevance cases pass on any call and carry no answer to compare", category)
	case strings.Contains(c, "parallel"):
		return RulesBFCLParallel, nil
	case strings.Contains(c, "multiple"):
		return RulesBFCLMultiple, nil
	}
	return RulesBFCLSimple, nil
}

// BFCLImport says what ImportBFCL reads and writes.
type BFCLImport struct {
	// Questions is the leaderboard's test file (JSON Lines); QuestionsName
	// names it in errors and gives the category.
	Questions     io.Reader
	QuestionsName string
	// Answers is the possible_answer file; nil for irrelevance categories.
	Answers     io.Reader
	AnswersName string
	// Category overrides the category derived from QuestionsName.
	Category string
}

type bfclQuestion struct {
	ID         string
	Question   [][]Message
	Function   []json.RawMessage
	answer     []json.RawMessage // ground truth entries
	line       int               // line in the questions file
	answerLine int               // line in the answers file
}

// ImportBFCL converts leaderboard files into dataset lines written to out
// and returns how many cases it wrote. Parameter types are mapped to JSON
// Schema (dict → object, float → number, tuple → array, any → no type);
// dotted function names are kept as tool names (docket eval maps them to
// model-safe names and back). Every imported tool is at_most_once: the
// leaderboard does not say what its functions do, so they are assumed unsafe
// to repeat, and none runs while planning. Acceptable values become one_of
// matchers; "" among them becomes "optional". Every problem is reported with
// its file and line.
func ImportBFCL(in BFCLImport, out io.Writer) (int, error) {
	cat := in.Category
	if cat == "" {
		cat = BFCLCategory(in.QuestionsName)
	}
	rules, err := BFCLRules(cat)
	if err != nil {
		return 0, err
	}
	if rules == RulesBFCLIrrelevance && in.Answers != nil {
		return 0, fmt.Errorf("category %s has no answers: the right answer is to call nothing; leave out --answers", cat)
	}
	if rules != RulesBFCLIrrelevance && in.Answers == nil {
		return 0, fmt.Errorf("category %s needs its possible_answer file (--answers)", cat)
	}
	var probs []Problem
	var qs []*bfclQuestion
	byID := map[string]*bfclQuestion{}
	err = eachLine(in.Questions, func(line int, data []byte) bool {
		var q struct {
			ID       string            `json:"id"`
			Question [][]Message       `json:"question"`
			Function []json.RawMessage `json:"function"`
		}
		if err := json.Unmarshal(data, &q); err != nil {
			probs = append(probs, Problem{File: in.QuestionsName, Line: line, Field: jsonErrField(err), Msg: jsonErrMsg(err)})
			return len(probs) < 50
		}
		switch {
		case q.ID == "":
			probs = append(probs, Problem{File: in.QuestionsName, Line: line, Field: "id", Msg: "missing"})
		case byID[q.ID] != nil:
			probs = append(probs, Problem{File: in.QuestionsName, Line: line, Case: q.ID, Field: "id", Msg: "duplicate id"})
		case len(q.Question) == 0:
			probs = append(probs, Problem{File: in.QuestionsName, Line: line, Case: q.ID, Field: "question", Msg: "missing"})
		case len(q.Function) == 0 && rules != RulesBFCLIrrelevance:
			probs = append(probs, Problem{File: in.QuestionsName, Line: line, Case: q.ID, Field: "function", Msg: "missing: a case needs at least one function"})
		default:
			bq := &bfclQuestion{ID: q.ID, Question: q.Question, Function: q.Function, line: line}
			byID[q.ID] = bq
			qs = append(qs, bq)
		}
		return len(probs) < 50
	})
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", in.QuestionsName, err)
	}
	if in.Answers != nil {
		err = eachLine(in.Answers, func(line int, data []byte) bool {
			var a struct {
				ID          string            `json:"id"`
				GroundTruth []json.RawMessage `json:"ground_truth"`
			}
			if err := json.Unmarshal(data, &a); err != nil {
				probs = append(probs, Problem{File: in.AnswersName, Line: line, Field: jsonErrField(err), Msg: jsonErrMsg(err)})
				return len(probs) < 50
			}
			q := byID[a.ID]
			switch {
			case q == nil:
				probs = append(probs, Problem{File: in.AnswersName, Line: line, Case: a.ID, Field: "id", Msg: "no question in " + in.QuestionsName + " has this id"})
			case q.answer != nil:
				probs = append(probs, Problem{File: in.AnswersName, Line: line, Case: a.ID, Field: "id", Msg: "duplicate answer"})
			case len(a.GroundTruth) == 0:
				probs = append(probs, Problem{File: in.AnswersName, Line: line, Case: a.ID, Field: "ground_truth", Msg: "empty"})
			default:
				q.answer, q.answerLine = a.GroundTruth, line
			}
			return len(probs) < 50
		})
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", in.AnswersName, err)
		}
	}
	n := 0
	var buf bytes.Buffer
	for _, q := range qs {
		line, ps := bfclCase(q, cat, rules, in)
		if len(ps) > 0 {
			probs = append(probs, ps...)
			continue
		}
		if len(probs) > 0 {
			continue
		}
		buf.Write(line)
		buf.WriteByte('\n')
		n++
	}
	if len(probs) > 0 {
		return 0, &FileError{Problems: probs}
	}
	if n == 0 {
		return 0, fmt.Errorf("%s holds no case", in.QuestionsName)
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return n, nil
}

// importedCase is the JSON written for one leaderboard case.
type importedCase struct {
	ID       string         `json:"id"`
	Category string         `json:"category"`
	Messages []Message      `json:"messages"`
	Tools    []importedTool `json:"tools"`
	Rules    string         `json:"rules"`
	Expect   importedExpect `json:"expect"`
	Source   string         `json:"source"`
}

type importedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Effect      string          `json:"effect"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type importedExpect struct {
	NoAction bool              `json:"no_action,omitempty"`
	Actions  []json.RawMessage `json:"actions,omitempty"`
}

// BFCLSource is the attribution every imported case carries.
const BFCLSource = "Berkeley Function Calling Leaderboard (github.com/ShishirPatil/gorilla, Apache-2.0)"

func bfclCase(q *bfclQuestion, cat, rules string, in BFCLImport) ([]byte, []Problem) {
	prob := func(file string, line int, field, format string, a ...any) []Problem {
		return []Problem{{File: file, Line: line, Case: q.ID, Field: field, Msg: fmt.Sprintf(format, a...)}}
	}
	c := importedCase{ID: q.ID, Category: cat, Rules: rules, Source: BFCLSource, Tools: []importedTool{}}
	for _, turn := range q.Question {
		c.Messages = append(c.Messages, turn...)
	}
	for i, raw := range q.Function {
		fv, err := parseValue(raw)
		if err != nil || fv.k != kObject {
			return nil, prob(in.QuestionsName, q.line, fmt.Sprintf("function[%d]", i), "not a JSON object")
		}
		name, _ := fv.get("name")
		if name.k != kString || name.s == "" {
			return nil, prob(in.QuestionsName, q.line, fmt.Sprintf("function[%d].name", i), "missing")
		}
		t := importedTool{Name: name.s, Effect: "at_most_once"}
		if d, ok := fv.get("description"); ok && d.k == kString {
			t.Description = d.s
		}
		params, ok := fv.get("parameters")
		if !ok || params.k != kObject {
			params = value{k: kObject, keys: []string{"type", "properties"}, vals: []value{{k: kString, s: "dict"}, {k: kObject}}}
		}
		t.InputSchema = json.RawMessage(bfclSchema(params, true).String())
		c.Tools = append(c.Tools, t)
	}
	if rules == RulesBFCLIrrelevance {
		c.Expect.NoAction = true
	} else {
		if q.answer == nil {
			return nil, prob(in.QuestionsName, q.line, "id", "no answer in %s has this id", in.AnswersName)
		}
		for i, raw := range q.answer {
			gt, err := parseValue(raw)
			if err != nil || gt.k != kObject || len(gt.keys) != 1 || gt.vals[0].k != kObject {
				return nil, prob(in.AnswersName, q.answerLine, fmt.Sprintf("ground_truth[%d]", i), "want {\"function name\": {\"param\": [acceptable values]}}")
			}
			act := map[string]any{"id": fmt.Sprintf("e%d", i+1), "tool": gt.keys[0]}
			params := gt.vals[0]
			var args bytes.Buffer
			args.WriteByte('{')
			for k, p := range params.keys {
				accs := params.vals[k]
				if accs.k != kList {
					return nil, prob(in.AnswersName, q.answerLine, fmt.Sprintf("ground_truth[%d].%s.%s", i, gt.keys[0], p), "want a list of acceptable values")
				}
				var vals []value
				optional := false
				for _, a := range accs.list {
					if isEmptyString(a) {
						optional = true
						continue
					}
					vals = append(vals, a)
				}
				if k > 0 {
					args.WriteByte(',')
				}
				kq, _ := json.Marshal(p)
				args.Write(kq)
				args.WriteByte(':')
				var m strings.Builder
				m.WriteByte('{')
				if len(vals) > 0 {
					m.WriteString(`"one_of":`)
					m.WriteString(value{k: kList, list: vals}.String())
				}
				if optional {
					if len(vals) > 0 {
						m.WriteByte(',')
					}
					m.WriteString(`"optional":true`)
				}
				if len(vals) == 0 && !optional {
					// upstream data with an empty list of acceptable values:
					// no value passes there, none passes here
					m.WriteString(`"one_of":[]`)
				}
				m.WriteByte('}')
				args.WriteString(m.String())
			}
			args.WriteByte('}')
			act["args"] = json.RawMessage(args.Bytes())
			b, err := json.Marshal(act)
			if err != nil {
				return nil, prob(in.AnswersName, q.answerLine, "ground_truth", "%v", err)
			}
			c.Expect.Actions = append(c.Expect.Actions, b)
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, prob(in.QuestionsName, q.line, "", "%v", err)
	}
	return b, nil
}

// bfclSchema maps a leaderboard parameter schema to JSON Schema, keeping
// key order. Only keywords that mean the same in JSON Schema are kept.
func bfclSchema(s value, top bool) value {
	if s.k != kObject {
		return value{k: kObject}
	}
	out := value{k: kObject}
	add := func(k string, v value) {
		out.keys = append(out.keys, k)
		out.vals = append(out.vals, v)
	}
	for i, k := range s.keys {
		v := s.vals[i]
		switch k {
		case "type":
			if v.k != kString {
				continue
			}
			switch v.s {
			case "dict":
				add(k, value{k: kString, s: "object"})
			case "float":
				add(k, value{k: kString, s: "number"})
			case "tuple":
				add(k, value{k: kString, s: "array"})
			case "any":
				// any JSON value: no type keyword
			default:
				add(k, v)
			}
		case "properties":
			if v.k != kObject {
				continue
			}
			props := value{k: kObject}
			for j, pk := range v.keys {
				props.keys = append(props.keys, pk)
				props.vals = append(props.vals, bfclSchema(v.vals[j], false))
			}
			add(k, props)
		case "items", "additionalProperties":
			if v.k == kObject {
				add(k, bfclSchema(v, false))
			}
		case "required":
			if v.k == kList {
				add(k, v)
			}
		case "description", "enum", "default", "minimum", "maximum", "format":
			add(k, v)
		}
	}
	if top {
		if t, ok := out.get("type"); !ok || t.s != "object" {
			out.keys = append([]string{"type"}, out.keys...)
			out.vals = append([]value{{k: kString, s: "object"}}, out.vals...)
			if ok {
				for i, k := range out.keys[1:] {
					if k == "type" {
						out.keys = append(out.keys[:i+1], out.keys[i+2:]...)
						out.vals = append(out.vals[:i+1], out.vals[i+2:]...)
						break
					}
				}
			}
		}
	}
	return out
}

// GroundTruthCalls builds a plan from a case's expectation: for every
// expected (non-optional) action one call, each argument set to its pick-th
// acceptable value (cycling; arguments that may be omitted and have no value
// are left out). Objects given as leaderboard answers ({"key": [values]})
// are made concrete the same way; an argument that may be omitted and that
// the tool does not define is left out. It is how tests check that the scorer
// accepts every case's own answer.
func GroundTruthCalls(c *Case, pick int) []Call {
	var out []Call
	idOf := map[string]string{}
	for i, w := range c.Expect.Actions {
		if w.Optional {
			continue
		}
		idOf[w.ID] = fmt.Sprintf("c%d", i+1)
	}
	for _, w := range c.Expect.Actions {
		if w.Optional {
			continue
		}
		var props map[string]bfclParam
		if spec, ok := c.toolSpec(w.Tool); ok {
			props = bfclFuncOf(w.Tool, spec.InputSchema).props
		}
		args := value{k: kObject}
		for _, a := range w.Args {
			m := &a.Matcher
			if _, defined := props[a.Name]; m.Optional && props != nil && !defined {
				continue // may be omitted, and the tool does not take it
			}
			var v value
			switch {
			case m.equals != nil:
				v = *m.equals
			case len(m.oneOf) > 0:
				v = m.oneOf[pick%len(m.oneOf)]
			case m.num != nil:
				nv, err := numberValue(string(*m.Number))
				if err != nil {
					continue
				}
				v = nv
			case m.Ref != "":
				id, path, _ := strings.Cut(m.Ref, ".")
				if path == "" {
					path = "output"
				}
				v = value{k: kString, s: "${" + idOf[id] + "." + path + "}"}
			default:
				continue
			}
			if isBFCL(c.Rules) {
				v = concrete(v, props[a.Name])
			}
			args.keys = append(args.keys, a.Name)
			args.vals = append(args.vals, v)
		}
		var deps []string
		for _, d := range w.DependsOn {
			deps = append(deps, idOf[d])
		}
		out = append(out, Call{ID: idOf[w.ID], Tool: w.Tool, Args: json.RawMessage(args.String()), DependsOn: deps})
	}
	return out
}

// concrete turns a leaderboard answer for an object parameter (each key
// mapped to acceptable values) into one object.
func concrete(v value, p bfclParam) value {
	switch {
	case p.typ == "dict" && v.k == kObject:
		return concreteDict(v)
	case p.typ == "array" && p.item == "dict" && v.k == kList:
		out := value{k: kList}
		for _, e := range v.list {
			if e.k == kObject {
				e = concreteDict(e)
			}
			out.list = append(out.list, e)
		}
		return out
	}
	return v
}

func concreteDict(v value) value {
	out := value{k: kObject}
	for i, k := range v.keys {
		accs := asList(v.vals[i])
		for _, a := range accs {
			if !isEmptyString(a) {
				out.keys = append(out.keys, k)
				out.vals = append(out.vals, a)
				break
			}
		}
	}
	return out
}
