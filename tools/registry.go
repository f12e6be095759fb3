package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools/policy"
)

var _ plan.Validator = (*Registry)(nil)

// Registry holds tools by name and validates their arguments. Safe for
// concurrent use: it is immutable after NewRegistry.
type Registry struct {
	entries map[string]*entry
	names   []string
	hash    string
	legacy  string // Hash without bindings, as recorded by earlier versions
	policy  []policy.Rule
	budgets []policy.Budget
}

// WithPolicy returns a registry with the same tools and the global policy
// rules (compiled; evaluated after each tool's own rules). The rules are
// part of its Hash: a run started under one policy does not resume under
// another (or none) without accepting the change.
func (r *Registry) WithPolicy(rules []policy.Rule) *Registry {
	c := *r
	c.policy = slices.Clone(rules)
	c.hash = c.computeHash(true)
	return &c
}

// Policy returns the global policy rules (WithPolicy).
func (r *Registry) Policy() []policy.Rule { return r.policy }

// WithBudgets returns a registry with the same tools and these budgets
// (checked: policy.CheckBudgets). They are part of its Hash, like the
// policy.
func (r *Registry) WithBudgets(budgets []policy.Budget) *Registry {
	c := *r
	c.budgets = slices.Clone(budgets)
	c.hash = c.computeHash(true)
	return &c
}

// Budgets returns the budgets (WithBudgets).
func (r *Registry) Budgets() []policy.Budget { return r.budgets }

type entry struct {
	tool   Tool
	spec   Spec
	input  *jsonschema.Schema
	output *jsonschema.Schema // nil: no output schema
}

// RegistryError lists every problem NewRegistry found.
type RegistryError struct {
	Problems []string
}

func (e *RegistryError) Error() string {
	return "invalid tools: " + strings.Join(e.Problems, "; ")
}

// NewRegistry checks every tool (valid class, a Lookup tool implements Looker,
// schemas compile, the input schema is an object schema, names unique,
// compensations name registered tools) and reports every problem at once in a
// *RegistryError.
func NewRegistry(ts ...Tool) (*Registry, error) {
	r := &Registry{entries: make(map[string]*entry, len(ts))}
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for i, t := range ts {
		if t == nil {
			add("tool #%d: nil tool", i+1)
			continue
		}
		s := t.Spec()
		name := s.Name
		if name == "" {
			add("tool #%d: empty name", i+1)
			continue
		}
		if _, dup := r.entries[name]; dup {
			add("tool %q: duplicate name", name)
			continue
		}
		e := &entry{tool: t, spec: s}
		if !s.Class.Valid() {
			add("tool %q: invalid class %q (want one of %s)", name, s.Class, classList())
		}
		if s.Class == Lookup {
			if _, ok := t.(Looker); !ok {
				add("tool %q: class %q but the tool has no Lookup method", name, Lookup)
			}
		}
		if s.Timeout < 0 || s.KeyTTL < 0 || s.VisibilityLag < 0 {
			add("tool %q: negative duration (timeout %v, key_ttl %v, visibility_lag %v)", name, s.Timeout, s.KeyTTL, s.VisibilityLag)
		}
		if rt := s.Retry; rt.Attempts < 0 || rt.MaxBackoff < 0 || rt.Budget < 0 {
			add("tool %q: negative retry setting (attempts %d, max_backoff %v, budget %v)", name, rt.Attempts, rt.MaxBackoff, rt.Budget)
		}
		if l := s.Limits; l.MaxInFlight < 0 || l.Rate < 0 || l.Per < 0 || (l.Rate > 0) != (l.Per > 0) {
			add("tool %q: bad limits (max_in_flight %d, rate %d per %v): none may be negative, and a rate needs a window", name, l.MaxInFlight, l.Rate, l.Per)
		}
		for arg, limit := range s.Approval.Above {
			if _, err := parseDecimal(string(limit)); err != nil {
				add("tool %q: approve_above %q: limit %q is not a number", name, arg, limit)
			}
		}
		if in, err := compileInput(name, s.InputSchema); err != nil {
			add("tool %q: input schema: %v", name, err)
		} else {
			e.input = in
		}
		if len(bytes.TrimSpace(s.OutputSchema)) > 0 {
			if out, err := compileSchema(name+"/output", s.OutputSchema); err != nil {
				add("tool %q: output schema: %v", name, err)
			} else {
				e.output = out
			}
		}
		r.entries[name] = e
		r.names = append(r.names, name)
	}
	for _, name := range r.names {
		c := r.entries[name].spec.Compensate
		if c == nil {
			continue
		}
		if _, ok := r.entries[c.Tool]; !ok {
			add("tool %q: compensate names unknown tool %q", name, c.Tool)
		}
		if err := checkCompensationTemplate(c.Args); err != nil {
			add("tool %q: compensate args: %v", name, err)
		}
	}
	if len(problems) > 0 {
		return nil, &RegistryError{Problems: problems}
	}
	sort.Strings(r.names)
	r.hash = r.computeHash(true)
	r.legacy = r.computeHash(false)
	return r, nil
}

func classList() string {
	s := make([]string, len(Classes))
	for i, c := range Classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// compileSchema compiles one JSON Schema document. Remote references are
// refused: a schema must be self-contained.
func compileSchema(loc string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	url := "mem:///" + loc + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, schemaErr(err)
	}
	return sch, nil
}

// CheckSchema reports whether raw is a JSON Schema that compiles (draft
// 2020-12 unless it says otherwise; external references are not loaded), with
// a one-line message naming each failing place.
func CheckSchema(raw json.RawMessage) error {
	_, err := compileSchema("schema", raw)
	return err
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %q: external references are not loaded", url)
}

// schemaErr turns the compiler's multi-line message into one line: each
// failing place of the schema and what is wrong there.
func schemaErr(err error) error {
	var se *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &se) && errors.As(se.Err, &ve) {
		var parts []string
		for _, p := range schemaProblems(nil, nil, nil, ve) {
			parts = append(parts, fmt.Sprintf("at %s: %s", cmpOr(p.Path, "/"), p.Msg))
		}
		return fmt.Errorf("not a valid JSON Schema: %s", strings.Join(parts, "; "))
	}
	return errors.New(strings.ReplaceAll(err.Error(), "mem:///", ""))
}

func compileInput(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New(`missing (want an object schema: {"type": "object", ...})`)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, errors.New("not a JSON object")
	}
	var typ string
	if err := json.Unmarshal(top["type"], &typ); err != nil || typ != "object" {
		return nil, errors.New(`not an object schema (want "type": "object" at the top)`)
	}
	return compileSchema(name+"/input", raw)
}

// Get returns the tool registered under name.
func (r *Registry) Get(name string) (Tool, bool) {
	e, ok := r.entries[name]
	if !ok {
		return nil, false
	}
	return e.tool, true
}

// Spec returns the spec of the tool registered under name, as it was when the
// registry was built.
func (r *Registry) Spec(name string) (Spec, bool) {
	e, ok := r.entries[name]
	if !ok {
		return Spec{}, false
	}
	return e.spec, true
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return append([]string(nil), r.names...) }

func (r *Registry) lookup(tool string) (*entry, error) {
	e, ok := r.entries[tool]
	if !ok {
		return nil, fmt.Errorf("tool %q: %w", tool, ErrUnknownTool)
	}
	return e, nil
}

// ValidateArgs implements plan.Validator: args must satisfy the tool's input
// schema, except that a reference string ("${a1.output.id}") is accepted wherever
// a value is expected. A string that contains "${" but is not exactly one
// reference is reported as a problem at its path. Unknown tool: an error
// wrapping ErrUnknownTool. Invalid: *ArgsError.
//
// A reference is tolerated by ignoring every schema failure located at or under
// it (for anyOf/oneOf: a branch whose only failures are there counts as
// passing). Keywords that judge a parent by a child's value (const or enum on a
// whole object, uniqueItems) may still fail; the executor validates resolved
// arguments again before calling.
func (r *Registry) ValidateArgs(tool string, args json.RawMessage) error {
	e, err := r.lookup(tool)
	if err != nil {
		return err
	}
	return validateArgs(tool, e.input, args, true)
}

// ValidateResolved validates fully resolved arguments: every string is plain
// data, reference-looking or not.
func (r *Registry) ValidateResolved(tool string, args json.RawMessage) error {
	e, err := r.lookup(tool)
	if err != nil {
		return err
	}
	return validateArgs(tool, e.input, args, false)
}

// ValidateOutput validates an output against the tool's output schema, if any
// (it must be JSON in any case). Invalid: *ArgsError whose paths are in the output.
func (r *Registry) ValidateOutput(tool string, output json.RawMessage) error {
	e, err := r.lookup(tool)
	if err != nil {
		return err
	}
	v, err := decodeJSON(output)
	if err != nil {
		return &ArgsError{Tool: tool, Problems: []ArgProblem{{Path: "", Msg: "output is not valid JSON: " + err.Error()}}}
	}
	if e.output == nil {
		return nil
	}
	if problems := schemaProblems(e.output, v, nil, nil); len(problems) > 0 {
		return &ArgsError{Tool: tool, Problems: problems}
	}
	return nil
}

func decodeJSON(data []byte) (any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty")
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

func validateArgs(tool string, sch *jsonschema.Schema, args json.RawMessage, allowRefs bool) error {
	v, err := decodeJSON(args)
	if err != nil {
		return &ArgsError{Tool: tool, Problems: []ArgProblem{{Path: "", Msg: "arguments are not valid JSON: " + err.Error()}}}
	}
	if _, ok := v.(map[string]any); !ok {
		return &ArgsError{Tool: tool, Problems: []ArgProblem{{Path: "", Msg: fmt.Sprintf("arguments must be a JSON object, got %s", JSONKind(v))}}}
	}
	var refs [][]string
	var problems []ArgProblem
	if allowRefs {
		walkStrings(v, nil, func(loc []string, s string) {
			if !strings.Contains(s, "${") {
				return
			}
			if _, ok, err := plan.ParseRef(s); err != nil {
				problems = append(problems, ArgProblem{Path: pointer(loc), Msg: err.Error()})
			} else if ok {
				refs = append(refs, append([]string(nil), loc...))
			}
		})
	}
	problems = append(problems, schemaProblems(sch, v, refs, nil)...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
		return &ArgsError{Tool: tool, Problems: problems}
	}
	return nil
}

func walkStrings(v any, loc []string, fn func(loc []string, s string)) {
	switch v := v.(type) {
	case string:
		fn(loc, v)
	case map[string]any:
		for k, x := range v {
			walkStrings(x, append(loc, k), fn)
		}
	case []any:
		for i, x := range v {
			walkStrings(x, append(loc, fmt.Sprint(i)), fn)
		}
	}
}

// schemaProblems validates v and returns the failures not explained by a
// reference located at one of refs.
func schemaProblems(sch *jsonschema.Schema, v any, refs [][]string, ve *jsonschema.ValidationError) []ArgProblem {
	if ve == nil {
		err := sch.Validate(v)
		if err == nil {
			return nil
		}
		if !errors.As(err, &ve) {
			return []ArgProblem{{Path: "", Msg: err.Error()}}
		}
	}
	var problems []ArgProblem
	seen := map[ArgProblem]bool{}
	for _, leaf := range residual(ve, refs) {
		for _, p := range describe(leaf) {
			if !seen[p] {
				seen[p] = true
				problems = append(problems, p)
			}
		}
	}
	if len(problems) == 0 && len(refs) == 0 {
		// Cannot happen with a failing validation, but never report "valid" for it.
		problems = append(problems, ArgProblem{Path: "", Msg: ve.Error()})
	}
	return problems
}

// residual returns the leaf failures under e that no reference explains.
func residual(e *jsonschema.ValidationError, refs [][]string) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		for _, r := range refs {
			if hasPrefix(e.InstanceLocation, r) {
				return nil
			}
		}
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		for _, c := range e.Causes {
			rc := residual(c, refs)
			if len(rc) == 0 {
				return nil // this branch passes once references are tolerated
			}
			out = append(out, rc...)
		}
		return out
	}
	for _, c := range e.Causes {
		out = append(out, residual(c, refs)...)
	}
	return out
}

func hasPrefix(loc, prefix []string) bool {
	if len(prefix) > len(loc) {
		return false
	}
	for i := range prefix {
		if loc[i] != prefix[i] {
			return false
		}
	}
	return true
}

// describe turns one leaf failure into problems, naming the property for
// "required" and "additionalProperties" failures.
func describe(e *jsonschema.ValidationError) []ArgProblem {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		var ps []ArgProblem
		for _, m := range k.Missing {
			ps = append(ps, ArgProblem{Path: pointer(append(append([]string(nil), e.InstanceLocation...), m)), Msg: "missing required property"})
		}
		return ps
	case *kind.AdditionalProperties:
		var ps []ArgProblem
		for _, p := range k.Properties {
			ps = append(ps, ArgProblem{Path: pointer(append(append([]string(nil), e.InstanceLocation...), p)), Msg: "unknown property (not allowed by the schema)"})
		}
		return ps
	}
	leaf := &jsonschema.ValidationError{ErrorKind: e.ErrorKind, InstanceLocation: e.InstanceLocation}
	msg := leaf.BasicOutput().Error.String()
	return []ArgProblem{{Path: pointer(e.InstanceLocation), Msg: msg}}
}

// pointer renders a JSON Pointer (RFC 6901).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// Hash is a stable digest ("sha256:<hex>") of everything in the tool
// definitions that changes what a call does or how it is protected: each
// tool's name, class, canonical input and output schemas, timeout (it bounds
// how long an earlier attempt may still take effect, so it sets when a
// lookup's "not found" is trusted), key_ttl, visibility_lag, approval rules,
// compensation, and its Binding (request, output pointer, key header, lookup;
// an MCP tool's server). A change means "the tools changed". Descriptions are
// not part of it: they only guide the model, and a recorded plan no longer
// asks it.
func (r *Registry) Hash() string { return r.hash }

// LegacyHash is the digest earlier versions of docket recorded for the same
// tools, which left out every Binding. A run whose recorded hash equals it
// was started by such a version with tools whose other fields are unchanged;
// whether their requests changed cannot be told.
func (r *Registry) LegacyHash() string { return r.legacy }

type hashedTool struct {
	Name          string          `json:"name"`
	Class         Class           `json:"class"`
	Input         json.RawMessage `json:"input_schema"`
	Output        json.RawMessage `json:"output_schema,omitempty"`
	Timeout       time.Duration   `json:"timeout"`
	KeyTTL        time.Duration   `json:"key_ttl"`
	VisibilityLag time.Duration   `json:"visibility_lag"`
	Always        bool            `json:"approval_always"`
	Above         []aboveLimit    `json:"approve_above,omitempty"`
	Compensate    *hashedComp     `json:"compensate,omitempty"`
	Policy        []hashedRule    `json:"policy,omitempty"`
	Binding       json.RawMessage `json:"binding,omitempty"`
}

type aboveLimit struct {
	Arg   string `json:"arg"`
	Limit string `json:"limit"` // normalised decimal, so 100 and 1e2 hash alike
}

// hashedRule is a policy rule as the tools hash sees it (a built-in rule's
// Func is described by the approval fields above).
type hashedRule struct {
	Name           string        `json:"name,omitempty"`
	When           string        `json:"when"`
	Outcome        string        `json:"outcome"`
	Approvers      int           `json:"approvers,omitempty"`
	ApproverNames  []string      `json:"approver_names,omitempty"`
	ApproverGroups []string      `json:"approver_groups,omitempty"`
	ExcludeCreator bool          `json:"exclude_creator,omitempty"`
	TTL            time.Duration `json:"ttl,omitempty"`
	Message        string        `json:"message,omitempty"`
}

func hashRules(rules []policy.Rule) []hashedRule {
	var out []hashedRule
	for _, r := range rules {
		out = append(out, hashedRule{Name: r.Name, When: r.When, Outcome: string(r.Outcome), Approvers: r.Approvers,
			ApproverNames: r.ApproverNames, ApproverGroups: r.ApproverGroups, ExcludeCreator: r.ExcludeCreator, TTL: r.TTL, Message: r.Message})
	}
	return out
}

type hashedComp struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

func (r *Registry) computeHash(withBinding bool) string {
	defs := make([]hashedTool, 0, len(r.names))
	for _, name := range r.names {
		s := r.entries[name].spec
		h := hashedTool{
			Name: name, Class: s.Class,
			Input: canonical(s.InputSchema), Output: canonical(s.OutputSchema),
			Timeout: s.Timeout, KeyTTL: s.KeyTTL, VisibilityLag: s.VisibilityLag,
			Always: s.Approval.Always,
		}
		for arg, limit := range s.Approval.Above {
			d, _ := parseDecimal(string(limit)) // checked in NewRegistry
			h.Above = append(h.Above, aboveLimit{Arg: arg, Limit: d.String()})
		}
		sort.Slice(h.Above, func(i, j int) bool { return h.Above[i].Arg < h.Above[j].Arg })
		if s.Compensate != nil {
			h.Compensate = &hashedComp{Tool: s.Compensate.Tool, Args: canonical(s.Compensate.Args)}
		}
		h.Policy = hashRules(s.Policy)
		if withBinding {
			h.Binding = canonical(s.Binding)
		}
		defs = append(defs, h)
	}
	var data []byte
	var err error
	switch {
	case len(r.policy) == 0 && len(r.budgets) == 0:
		data, err = json.Marshal(defs)
	case len(r.budgets) == 0:
		data, err = json.Marshal(struct {
			Tools  []hashedTool `json:"tools"`
			Policy []hashedRule `json:"policy"`
		}{defs, hashRules(r.policy)})
	default:
		data, err = json.Marshal(struct {
			Tools   []hashedTool    `json:"tools"`
			Policy  []hashedRule    `json:"policy,omitempty"`
			Budgets []policy.Budget `json:"budgets"`
		}{defs, hashRules(r.policy), r.budgets})
	}
	if err != nil {
		panic(fmt.Sprintf("tools: hashing definitions: %v", err)) // only JSON-safe fields
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// canonical returns the RFC 8785 form of raw, or its compacted form when it
// cannot be canonicalised, so hashing never fails.
func canonical(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if c, err := jcs.Transform(raw); err == nil {
		return c
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		s, _ := json.Marshal(string(raw))
		return s
	}
	return b.Bytes()
}
