package evals

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// Case is one evaluation case: a request, the tools offered, and what a right
// plan looks like. See the package documentation for the JSON form.
type Case struct {
	// ID names the case; unique within its dataset.
	ID string `json:"id"`
	// Category groups cases in reports ("crm", "irrelevance", "simple_python").
	Category string `json:"category,omitempty"`
	// Goal is the request in one sentence. Exactly one of Goal and Messages is set.
	Goal string `json:"goal,omitempty"`
	// Messages is the conversation that leads to the plan.
	Messages []Message `json:"messages,omitempty"`
	// Tools are tool definitions given inline.
	Tools []ToolDef `json:"tools"`
	// ToolsFile is a tools file (tools/README.md) relative to the dataset file.
	ToolsFile string `json:"tools_file,omitempty"`
	// Approve is the run policy the plan would be executed under: "safe"
	// (default), "all" or "none" (executor/README.md, Approvals).
	Approve string `json:"approve,omitempty"`
	// Rules selects the scoring rules: "docket" (default) or one of the
	// leaderboard checkers "bfcl_simple", "bfcl_multiple", "bfcl_parallel",
	// "bfcl_irrelevance".
	Rules string `json:"rules,omitempty"`
	// Expect is what a right plan does.
	Expect Expect `json:"expect"`
	// Source records where the case came from (free text, e.g. "bfcl").
	Source string `json:"source,omitempty"`
	// World makes the case execution-level: the plan runs against a fresh
	// simulated world and the world's final state is compared, so different
	// but equivalent plans both pass.
	World *WorldSpec `json:"world,omitempty"`
	// Reference is a plan known to be right (optional). Scoring ignores it;
	// docket eval check scores it against the expectation, so a dataset's
	// expectations are tested too, and test models answer with it.
	Reference []Call `json:"reference,omitempty"`
	// Observations answer read_only tools while the model plans (they run
	// during planning, executor/README.md rule 3): a call gets the output of the
	// first observation for its tool whose args equal the call's (or that
	// gives no args). Evaluations never reach real systems.
	Observations []Observation `json:"observations,omitempty"`

	reg       *tools.Registry
	file      string
	line      int
	funcsOnce sync.Once
	funcs     []bfclFunc
}

// Registry returns the tools the case offers (set by LoadDataset).
func (c *Case) Registry() *tools.Registry { return c.reg }

// Where names the case's file and line for messages ("data.jsonl:12").
func (c *Case) Where() string {
	if c.file == "" {
		return "case " + c.ID
	}
	return fmt.Sprintf("%s:%d", c.file, c.line)
}

// WorldSpec is an execution-level expectation.
type WorldSpec struct {
	// Name names the simulated world; docket eval provides "demoworld"
	// (evals/demoworld: catalogue, CRM, payments, settings, email). A case
	// without tools gets the world's tools.
	Name string `json:"name"`
	// Setup runs before the plan, to build the initial state.
	Setup []Call `json:"setup,omitempty"`
	// Effects are the expected final effect counters ("crm/ana@x.example": 1,
	// "email/ana@x.example/welcome-pack": 1). A counter not listed must be 0
	// unless AllowOtherEffects.
	Effects           map[string]int `json:"effects"`
	AllowOtherEffects bool           `json:"allow_other_effects,omitempty"`
}

// Observation is a read_only tool's answer during planning.
type Observation struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
	Output json.RawMessage `json:"output"`
}

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ToolDef is a tool given inline in a case: the parts of a tools-file entry
// that planning and scoring need (no request: datasets describe tools, they
// never call them).
type ToolDef struct {
	Name         string                 `json:"name"`
	Description  string                 `json:"description,omitempty"`
	Effect       tools.Class            `json:"effect"`
	InputSchema  json.RawMessage        `json:"input_schema"`
	OutputSchema json.RawMessage        `json:"output_schema,omitempty"`
	Approval     string                 `json:"approval,omitempty"`
	ApproveAbove map[string]json.Number `json:"approve_above,omitempty"`
}

// Expect is the expectation of a case.
type Expect struct {
	// NoAction: the right answer is to plan nothing (irrelevant or refused requests).
	NoAction bool `json:"no_action,omitempty"`
	// Actions are the expected actions, in any order unless DependsOn says otherwise.
	Actions []ExpectedAction `json:"actions,omitempty"`
	// ForbiddenTools may never appear in the plan.
	ForbiddenTools []string `json:"forbidden_tools,omitempty"`
	// ForbiddenClasses: no planned action may have one of these effect classes.
	ForbiddenClasses []tools.Class `json:"forbidden_classes,omitempty"`
	// AllowExtra says which unexpected actions are tolerated: "" (none) or
	// "read_only" (extra read-only calls, e.g. a lookup before a write).
	AllowExtra string `json:"allow_extra,omitempty"`
}

// ExpectedAction is one action a right plan contains.
type ExpectedAction struct {
	// ID names the action inside the expectation ("e1" by position when empty);
	// DependsOn and ref matchers use it. It need not equal the plan's ids.
	ID   string `json:"id,omitempty"`
	Tool string `json:"tool"`
	// Args maps each argument to a matcher, in document order.
	Args Args `json:"args,omitempty"`
	// DependsOn lists expected actions that must run before this one: the
	// plan's action must depend on theirs, directly or transitively.
	DependsOn []string `json:"depends_on,omitempty"`
	// Optional: the plan may leave this action out.
	Optional bool `json:"optional,omitempty"`
	// AllowExtraArgs tolerates arguments the expectation does not mention.
	AllowExtraArgs bool `json:"allow_extra_args,omitempty"`
}

// Arg is one argument's matcher.
type Arg struct {
	Name    string
	Matcher Matcher
}

// Args keeps argument matchers in document order.
type Args []Arg

// UnmarshalJSON decodes an object of matchers, keeping order.
func (a *Args) UnmarshalJSON(data []byte) error {
	kvs, err := orderedObject(data)
	if err != nil {
		return err
	}
	out := make(Args, 0, len(kvs))
	for _, kv := range kvs {
		var m Matcher
		if err := m.UnmarshalJSON(kv.raw); err != nil {
			return fmt.Errorf("argument %q: %w", kv.key, err)
		}
		out = append(out, Arg{Name: kv.key, Matcher: m})
	}
	*a = out
	return nil
}

// MarshalJSON writes the matchers as an object in order.
func (a Args) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, arg := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(arg.Name)
		b.Write(k)
		b.WriteByte(':')
		m, err := json.Marshal(arg.Matcher)
		if err != nil {
			return nil, err
		}
		b.Write(m)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type keyRaw struct {
	key string
	raw json.RawMessage
}

// orderedObject splits a JSON object into its members, in order.
func orderedObject(data []byte) ([]keyRaw, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", clipText(string(data), 40))
	}
	var out []keyRaw
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := kt.(string)
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, keyRaw{key, raw})
	}
	return out, nil
}

// Rule sets.
const (
	RulesDocket          = "docket"
	RulesBFCLSimple      = "bfcl_simple"
	RulesBFCLMultiple    = "bfcl_multiple"
	RulesBFCLParallel    = "bfcl_parallel"
	RulesBFCLIrrelevance = "bfcl_irrelevance"
)

func validRules(r string) bool {
	switch r {
	case "", RulesDocket, RulesBFCLSimple, RulesBFCLMultiple, RulesBFCLParallel, RulesBFCLIrrelevance:
		return true
	}
	return false
}

func isBFCL(r string) bool { return strings.HasPrefix(r, "bfcl_") }

// Dataset is a loaded set of cases.
type Dataset struct {
	// Path is the file the cases came from.
	Path  string
	Cases []*Case
	byID  map[string]*Case
}

// Case returns the case with the given id.
func (d *Dataset) Case(id string) (*Case, bool) {
	c, ok := d.byID[id]
	return c, ok
}

// LoadOptions tune LoadDataset. The zero value is usable.
type LoadOptions struct {
	// Tools are offered to every case that names neither inline tools nor a
	// tools file (docket eval run --tools). Default: none, such a case is refused.
	Tools *tools.Registry
	// MaxProblems stops reading after this many problems. Default 50.
	MaxProblems int
	// Worlds are the tools of the simulated worlds, by WorldSpec.Name, for
	// execution-level cases that give no tools of their own.
	Worlds map[string]*tools.Registry
}

// Problem is one thing wrong with a dataset or plans file, naming the file,
// the line, the case and the field.
type Problem struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Case  string `json:"case,omitempty"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d", p.File, p.Line)
	if p.Case != "" {
		fmt.Fprintf(&b, ": case %q", p.Case)
	}
	if p.Field != "" {
		fmt.Fprintf(&b, ", field %s", p.Field)
	}
	b.WriteString(": ")
	b.WriteString(p.Msg)
	return b.String()
}

// FileError lists every problem found in an input file.
type FileError struct {
	Problems []Problem
}

func (e *FileError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// openMaybeGzip opens path, decompressing it when it ends in ".gz".
func openMaybeGzip(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

// OpenFile opens a dataset, plans or leaderboard file, decompressing it when
// its name ends in ".gz".
func OpenFile(path string) (io.ReadCloser, error) { return openMaybeGzip(path) }

// eachLine calls fn with every non-blank line of r and its 1-based number.
func eachLine(r io.Reader, fn func(line int, data []byte) bool) error {
	br := bufio.NewReaderSize(r, 1<<16)
	n := 0
	for {
		data, err := br.ReadBytes('\n')
		if len(data) > 0 {
			n++
			if t := bytes.TrimSpace(data); len(t) > 0 {
				if !fn(n, t) {
					return nil
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// LoadDataset reads a dataset (JSON Lines, optionally gzip-compressed when the
// name ends in ".gz"), checks every case and builds each case's tool registry.
// Every problem found is reported at once in a *FileError, each naming the
// file, line, case and field.
func LoadDataset(path string, opts *LoadOptions) (*Dataset, error) {
	var o LoadOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxProblems <= 0 {
		o.MaxProblems = 50
	}
	r, err := openMaybeGzip(path)
	if err != nil {
		return nil, fmt.Errorf("reading dataset: %w", err)
	}
	defer r.Close()
	d := &Dataset{Path: path, byID: map[string]*Case{}}
	var probs []Problem
	l := loader{dir: filepath.Dir(path), file: path, opts: o, files: map[string]toolsFileResult{}, inline: map[string]*tools.Registry{}}
	err = eachLine(r, func(line int, data []byte) bool {
		c, ps := l.parseCase(line, data)
		if c != nil {
			if prev, dup := d.byID[c.ID]; dup {
				ps = append(ps, Problem{File: path, Line: line, Case: c.ID, Field: "id", Msg: fmt.Sprintf("duplicate id (first used on line %d)", prev.line)})
			} else {
				d.byID[c.ID] = c
				d.Cases = append(d.Cases, c)
			}
		}
		probs = append(probs, ps...)
		return len(probs) < o.MaxProblems
	})
	if err != nil {
		return nil, fmt.Errorf("reading dataset %s: %w", path, err)
	}
	if len(probs) > 0 {
		return nil, &FileError{Problems: probs}
	}
	if len(d.Cases) == 0 {
		return nil, &FileError{Problems: []Problem{{File: path, Line: 0, Msg: "the dataset holds no case"}}}
	}
	return d, nil
}

// ParseCase decodes and checks one case line (as LoadDataset does, with inline
// tools only). It is meant for tests and fuzzing.
func ParseCase(data []byte) (*Case, error) {
	l := loader{file: "case", files: map[string]toolsFileResult{}, inline: map[string]*tools.Registry{}}
	c, ps := l.parseCase(1, data)
	if len(ps) > 0 {
		return nil, &FileError{Problems: ps}
	}
	return c, nil
}

type toolsFileResult struct {
	reg *tools.Registry
	err error
}

type loader struct {
	dir, file string
	opts      LoadOptions
	files     map[string]toolsFileResult
	inline    map[string]*tools.Registry // by the inline tools' JSON
}

var matcherNames = "equals, one_of, number, tolerance, normalize, pattern, ref, any, optional"

func (l *loader) parseCase(line int, data []byte) (*Case, []Problem) {
	var probs []Problem
	add := func(id, field, format string, a ...any) {
		probs = append(probs, Problem{File: l.file, Line: line, Case: id, Field: field, Msg: fmt.Sprintf(format, a...)})
	}
	c := new(Case)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(c); err != nil {
		id := ""
		var probe struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(data, &probe) == nil {
			id = probe.ID
		}
		add(id, jsonErrField(err), "%s", jsonErrMsg(err))
		return nil, probs
	}
	if dec.More() {
		add(c.ID, "", "unexpected data after the case object (one case per line)")
		return nil, probs
	}
	c.file, c.line = l.file, line
	id := c.ID
	if id == "" {
		add("", "id", "missing: every case needs an id")
	}
	if c.Category == "" {
		c.Category = "uncategorised"
	}
	switch {
	case c.Goal == "" && len(c.Messages) == 0:
		add(id, "goal", "missing: give goal or messages")
	case c.Goal != "" && len(c.Messages) > 0:
		add(id, "goal", "give goal or messages, not both")
	}
	for i, m := range c.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			add(id, fmt.Sprintf("messages[%d].role", i), "must be system, user or assistant, not %q", m.Role)
		}
	}
	switch c.Approve {
	case "", "safe", "all", "none":
	default:
		add(id, "approve", "must be safe, all or none, not %q", c.Approve)
	}
	if !validRules(c.Rules) {
		add(id, "rules", "must be docket, bfcl_simple, bfcl_multiple, bfcl_parallel or bfcl_irrelevance, not %q", c.Rules)
	}
	reg, ps := l.registry(c)
	for _, p := range ps {
		add(id, p.field, "%s", p.msg)
	}
	c.reg = reg
	l.checkExpect(c, add)
	if len(probs) > 0 {
		return c, probs
	}
	return c, nil
}

type fieldMsg struct{ field, msg string }

func (l *loader) registry(c *Case) (*tools.Registry, []fieldMsg) {
	switch {
	case len(c.Tools) > 0 && c.ToolsFile != "":
		return nil, []fieldMsg{{"tools", "give inline tools or tools_file, not both"}}
	case c.ToolsFile != "":
		p := c.ToolsFile
		if !filepath.IsAbs(p) {
			p = filepath.Join(l.dir, p)
		}
		res, ok := l.files[p]
		if !ok {
			res.reg, res.err = loadToolsFile(p)
			l.files[p] = res
			if res.err != nil {
				return nil, []fieldMsg{{"tools_file", res.err.Error()}}
			}
		}
		if res.err != nil {
			return nil, []fieldMsg{{"tools_file", "the tools file " + c.ToolsFile + " is invalid (see the first case that uses it)"}}
		}
		return res.reg, nil
	case c.Tools != nil && len(c.Tools) == 0:
		// "tools": [] offers nothing on purpose (a request no tool fits)
		reg, err := tools.NewRegistry()
		if err != nil {
			return nil, []fieldMsg{{"tools", err.Error()}}
		}
		return reg, nil
	case len(c.Tools) > 0:
		key, _ := json.Marshal(c.Tools)
		if reg, ok := l.inline[string(key)]; ok {
			return reg, nil
		}
		reg, ps := inlineRegistry(c.Tools)
		if len(ps) == 0 {
			l.inline[string(key)] = reg
		}
		return reg, ps
	case c.World != nil && l.opts.Worlds[c.World.Name] != nil:
		return l.opts.Worlds[c.World.Name], nil
	case c.World != nil:
		return nil, []fieldMsg{{"world.name", fmt.Sprintf("no simulated world %q is available (docket eval provides \"demoworld\")", c.World.Name)}}
	case l.opts.Tools != nil:
		return l.opts.Tools, nil
	}
	return nil, []fieldMsg{{"tools", "missing: give inline tools, a tools_file, or run with --tools"}}
}

// loadToolsFile loads a tools file for planning and scoring only, with
// toolsfile (the format's one parser): its tools are known by their specs,
// and the environment is not read ({{env "NAME"}} stays a template), since an
// evaluation never calls a tool.
func loadToolsFile(path string) (*tools.Registry, error) {
	f, err := toolsfile.Load(path, &toolsfile.Options{NoEnv: true})
	if err != nil {
		return nil, err
	}
	ts := make([]tools.Tool, 0, len(f.Tools))
	for _, t := range f.Tools {
		if t.Lookup != nil {
			ts = append(ts, &specLooker{specTool{spec: t.Spec}})
		} else {
			ts = append(ts, &specTool{spec: t.Spec})
		}
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		return nil, fmt.Errorf("tools file %s: %w", path, err)
	}
	return reg, nil
}

// LoadToolsFile loads a tools file as LoadDataset does for tools_file.
func LoadToolsFile(path string) (*tools.Registry, error) { return loadToolsFile(path) }

// specTool is a tool known only by its definition.
type specTool struct{ spec tools.Spec }

var _ tools.Tool = (*specTool)(nil)

func (t *specTool) Spec() tools.Spec { return t.spec }
func (t *specTool) Call(context.Context, tools.Call) (json.RawMessage, error) {
	return nil, tools.Permanent(fmt.Errorf("evals: tool %s is only described by a dataset, it cannot be called", t.spec.Name))
}

// specLooker is a lookup-class tool known only by its definition.
type specLooker struct{ specTool }

var _ tools.Looker = (*specLooker)(nil)

func (t *specLooker) Lookup(context.Context, tools.Call) (json.RawMessage, bool, error) {
	return nil, false, tools.Permanent(fmt.Errorf("evals: tool %s is only described by a dataset, it cannot be searched", t.spec.Name))
}

func inlineRegistry(defs []ToolDef) (*tools.Registry, []fieldMsg) {
	var ps []fieldMsg
	ts := make([]tools.Tool, 0, len(defs))
	for i, d := range defs {
		f := fmt.Sprintf("tools[%d]", i)
		if d.Name == "" {
			ps = append(ps, fieldMsg{f + ".name", "missing"})
		}
		if !d.Effect.Valid() {
			ps = append(ps, fieldMsg{f + ".effect", fmt.Sprintf("must be one of read_only, idempotent, keyed, lookup, at_most_once, not %q", d.Effect)})
		}
		if len(d.InputSchema) == 0 {
			ps = append(ps, fieldMsg{f + ".input_schema", "missing"})
		}
		s := tools.Spec{Name: d.Name, Description: d.Description, Class: d.Effect, InputSchema: d.InputSchema, OutputSchema: d.OutputSchema}
		switch d.Approval {
		case "":
		case "always":
			s.Approval.Always = true
		default:
			ps = append(ps, fieldMsg{f + ".approval", fmt.Sprintf("must be \"always\" or absent, not %q", d.Approval)})
		}
		s.Approval.Above = d.ApproveAbove
		if d.Effect == tools.Lookup {
			ts = append(ts, &specLooker{specTool{spec: s}})
		} else {
			ts = append(ts, &specTool{spec: s})
		}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		return nil, []fieldMsg{{"tools", err.Error()}}
	}
	return reg, nil
}

func (l *loader) checkExpect(c *Case, add func(id, field, format string, a ...any)) {
	e := &c.Expect
	id := c.ID
	if e.NoAction && len(e.Actions) > 0 {
		add(id, "expect.no_action", "no_action is true but expect.actions lists actions: choose one")
	}
	if !e.NoAction && len(e.Actions) == 0 && c.World == nil {
		add(id, "expect", "expects nothing: list actions, set no_action, or give a world with its expected effects")
	}
	if w := c.World; w != nil {
		if w.Name == "" {
			add(id, "world.name", "missing")
		}
		if w.Effects == nil {
			add(id, "world.effects", "missing: give the expected final effect counters ({} for none)")
		}
		for k, n := range w.Effects {
			if n < 0 {
				add(id, "world.effects."+k, "a count cannot be negative")
			}
		}
		if isBFCL(c.Rules) {
			add(id, "world", "leaderboard rules do not execute plans")
		}
	}
	if c.Rules == RulesBFCLIrrelevance && !e.NoAction {
		add(id, "expect.no_action", "bfcl_irrelevance cases must set no_action")
	}
	switch e.AllowExtra {
	case "", "read_only":
	default:
		add(id, "expect.allow_extra", "must be \"read_only\" or absent, not %q", e.AllowExtra)
	}
	for i, cl := range e.ForbiddenClasses {
		if !cl.Valid() {
			add(id, fmt.Sprintf("expect.forbidden_classes[%d]", i), "unknown class %q", cl)
		}
	}
	ids := map[string]int{}
	for i := range e.Actions {
		a := &e.Actions[i]
		if a.ID == "" {
			a.ID = fmt.Sprintf("e%d", i+1)
		}
		if _, dup := ids[a.ID]; dup {
			add(id, fmt.Sprintf("expect.actions[%d].id", i), "duplicate expected action id %q", a.ID)
		}
		ids[a.ID] = i
	}
	for i, a := range e.Actions {
		f := fmt.Sprintf("expect.actions[%d]", i)
		if a.Tool == "" {
			add(id, f+".tool", "missing")
		} else if c.reg != nil {
			if _, ok := c.reg.Spec(a.Tool); !ok {
				add(id, f+".tool", "%q is not among the case's tools (%s)", a.Tool, strings.Join(c.reg.Names(), ", "))
			}
		}
		for _, d := range a.DependsOn {
			if _, ok := ids[d]; !ok {
				add(id, f+".depends_on", "names %q, which is not an expected action id", d)
			} else if d == a.ID {
				add(id, f+".depends_on", "an action cannot depend on itself")
			}
		}
		for _, arg := range a.Args {
			af := f + ".args." + arg.Name
			m := arg.Matcher
			if isBFCL(c.Rules) && (m.Number != nil || m.Tolerance != nil || m.Pattern != "" || m.Ref != "" || m.Any || len(m.Normalize) > 0) {
				add(id, af, "leaderboard rules take only equals, one_of and optional matchers")
			}
			if m.Ref != "" {
				target, _, _ := strings.Cut(m.Ref, ".")
				if _, ok := ids[target]; !ok {
					add(id, af+".ref", "names %q, which is not an expected action id", target)
				}
			}
			if m.Pattern != "" {
				if _, err := regexp.Compile(m.Pattern); err != nil {
					add(id, af+".pattern", "not a regular expression: %v", err)
				}
			}
		}
	}
	for i, o := range c.Observations {
		f := fmt.Sprintf("observations[%d]", i)
		if c.reg != nil {
			if s, ok := c.reg.Spec(o.Tool); !ok {
				add(id, f+".tool", "%q is not among the case's tools", o.Tool)
			} else if s.Class != tools.ReadOnly {
				add(id, f+".tool", "%s is %s: only read_only tools run while planning", o.Tool, s.Class)
			}
		}
		if len(o.Output) == 0 || !json.Valid(o.Output) {
			add(id, f+".output", "missing: give the JSON the tool answers")
		}
	}
	if cyc := expectCycle(e.Actions); cyc != "" {
		add(id, "expect.actions", "depends_on has a cycle: %s", cyc)
	}
}

func expectCycle(as []ExpectedAction) string {
	deps := map[string][]string{}
	for _, a := range as {
		deps[a.ID] = a.DependsOn
	}
	state := map[string]int{}
	var stack []string
	var found string
	var visit func(string) bool
	visit = func(n string) bool {
		switch state[n] {
		case 1:
			i := len(stack) - 1
			for i >= 0 && stack[i] != n {
				i--
			}
			found = strings.Join(append(append([]string{}, stack[i:]...), n), " → ")
			return true
		case 2:
			return false
		}
		state[n] = 1
		stack = append(stack, n)
		for _, d := range deps[n] {
			if visit(d) {
				return true
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = 2
		return false
	}
	names := make([]string, 0, len(deps))
	for n := range deps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if visit(n) {
			return found
		}
	}
	return ""
}

// jsonErrField and jsonErrMsg turn encoding/json errors into a field and a message.
func jsonErrField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

func jsonErrMsg(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("wrong type: got JSON %s, want %s", te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + rest
	}
	return strings.TrimPrefix(msg, "json: ")
}

func clipText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
