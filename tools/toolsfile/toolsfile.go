package toolsfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// DefaultTimeout is a tool's call timeout when the file sets none.
const DefaultTimeout = 30 * time.Second

// File is a parsed and checked tools file.
type File struct {
	Version int
	// Tools are the HTTP tools, in file order.
	Tools []*Tool
	// MCPServers are the file's mcp_servers entries, checked but not connected.
	MCPServers []MCPServer
	// Policy holds the file's global rules ("policy" at the top level),
	// compiled; each tool's own rules are in its Spec.Policy.
	Policy []policy.Rule
	// Budgets are the file's budgets ("budgets" at the top level), checked.
	Budgets []policy.Budget
	// Warnings are things that work but should change: a credential typed
	// into the file (a header or variable named like one, with a literal
	// value instead of {{env "NAME"}}). They never quote the value.
	Warnings []Problem
}

// Tool is one HTTP tool as the file defines it, checked: its spec (with
// tools.Spec.Binding filled in from the request, output and lookup), its
// request and lookup templates, and the environment values they use.
// tools/httptool makes a callable tool of it.
type Tool struct {
	Spec    tools.Spec
	Request *Request
	// Output is a JSON Pointer selecting the recorded output from a 2xx
	// answer ("": the whole answer).
	Output string
	// KeyHeader is the header a keyed tool sends its key in ("": none).
	KeyHeader string
	// Lookup is the lookup block (nil: none).
	Lookup *Lookup
	// Env holds the values of the environment variables the tool's templates
	// use, read at parse (empty with Options.NoEnv). They are secrets: never
	// log or show them (the Tool's String and LogValue leave them out).
	Env map[string]string
}

var _ slog.LogValuer = (*Tool)(nil)

// String describes the tool without any environment value.
func (t *Tool) String() string {
	return fmt.Sprintf("%s (%s %s %s)", t.Spec.Name, t.Spec.Class, t.Request.Method, MaskURL(t.Request.URL.String()))
}

// GoString keeps environment values out of %#v.
func (t *Tool) GoString() string { return "toolsfile.Tool{" + t.String() + "}" }

// LogValue describes the tool without any environment value.
func (t *Tool) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Lookup is a tool's lookup block: a request that finds the effect of an
// earlier call, what counts as found, and what is recorded.
type Lookup struct {
	Request *Request
	Found   string // "nonempty" | "status_200"
	Output  string // a JSON Pointer into the answer ("": the whole answer)
}

// Request is a request or lookup block.
type Request struct {
	Method  string // GET, HEAD, POST, PUT, PATCH or DELETE
	URL     *Template
	Headers []Header // sorted by name; names canonical (http.CanonicalHeaderKey)
	// Body is the body template: a JSON tree whose strings are *Template (see
	// RenderBody); nil when HasBody is false.
	Body    any
	HasBody bool
	// BodySrc is the body as written (for showing it and for the tools hash).
	BodySrc json.RawMessage
}

// Header is one request header and its value template.
type Header struct {
	Name  string
	Value *Template
}

// MCPServer is one mcp_servers entry, kept for the MCP connector.
type MCPServer struct {
	Name    string            `json:"name"`
	Command string            `json:"command,omitempty"` // a local server: the program to run
	Args    []string          `json:"args,omitempty"`    // its arguments
	Env     map[string]string `json:"env,omitempty"`     // its environment; values may use {{env "NAME"}}
	URL     string            `json:"url,omitempty"`     // a remote server (streamable HTTP)
	// Headers for a remote server; values may use {{env "NAME"}} (see ExpandEnv).
	Headers map[string]string `json:"headers,omitempty"`
	// TrustAnnotations lets the server's readOnlyHint make a tool read_only.
	TrustAnnotations bool `json:"trust_annotations,omitempty"`
	// Tools classifies the server's tools by their MCP name.
	Tools map[string]MCPTool `json:"tools,omitempty"`
}

// MCPTool is the tools file's classification of one MCP tool.
type MCPTool struct {
	Effect        tools.Class
	Timeout       time.Duration // 0: not set
	KeyTTL        time.Duration
	VisibilityLag time.Duration
	Approval      tools.Approval
	Compensate    *tools.Compensation
	// Output is a JSON Pointer selecting the recorded output from the call's
	// result ("" : the whole result).
	Output string
	// Lookup declares another tool of the same server that finds the effect
	// of a call (effect "lookup", or "keyed" past key_ttl).
	Lookup *MCPLookup
	// Policy is the tool's own policy rules, compiled, as an HTTP tool's
	// (tools.Spec.Policy); their places read
	// mcp_servers[0].tools.NAME.policy[0].
	Policy []policy.Rule `json:"-"`
	// Retry is the tool's retry budget (tools.Spec.Retry), as an HTTP
	// tool's.
	Retry tools.Retry
	// Limits are the tool's max_in_flight and rate (tools.Spec.Limits), as
	// an HTTP tool's.
	Limits tools.Limits
}

// MCPLookup is an MCP tool's lookup: call Tool (a tool of the same server)
// with Args, a JSON object whose strings may be exactly "${input}" or
// "${input.PATH}" (the original call's arguments, type kept); the value that
// Output selects from its result is found when it is a non-empty array or
// object ("nonempty", the only Found rule) and is then recorded as the output.
type MCPLookup struct {
	Tool   string
	Args   json.RawMessage
	Found  string
	Output string
}

// Options configures Parse beyond the file itself. Every field is optional.
type Options struct {
	// Env reads environment variables. Default: os.Getenv.
	Env func(string) string
	// NoEnv reads no environment variable and requires none to be set: the
	// tools' Env stays empty. For showing a file (a request preview), never
	// for calling its tools.
	NoEnv bool
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Env == nil {
		out.Env = os.Getenv
	}
	return out
}

// Problem is one thing wrong with a tools file.
type Problem struct {
	Tool  string `json:"tool,omitempty"`  // tool name (or "#3" when it has none); "" for the file
	Field string `json:"field,omitempty"` // "effect", "request.url", "lookup.found", "mcp_servers[0].url"
	Msg   string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Tool != "" {
		fmt.Fprintf(&b, "tool %s: ", p.Tool)
	}
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// LoadError lists every problem found in a tools file.
type LoadError struct {
	Source   string // file name, or "" for Parse
	Problems []Problem
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("invalid tools file")
	if e.Source != "" {
		b.WriteString(" " + e.Source)
	}
	fmt.Fprintf(&b, " (%d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Load reads and parses a tools file (see Parse). A file that cannot be read
// is an error saying so and naming the file; a wrong one is a *LoadError
// naming the file.
func Load(path string, opts *Options) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if pe, ok := err.(*fs.PathError); ok {
			err = pe.Err
		}
		return nil, fmt.Errorf("reading tools file %s: %w", path, err)
	}
	f, err := Parse(data, opts)
	if le, ok := err.(*LoadError); ok {
		le.Source = path
	}
	return f, err
}

// Parse parses a tools file strictly (version 1, unknown fields refused) and
// checks it, reporting every problem at once in a *LoadError: each names the
// tool and the field, and a JSON syntax error its line and column. opts.Env
// reads the environment for {{env "NAME"}}: every variable a tool uses must
// be set now, and its value is kept in Tool.Env (unless opts.NoEnv).
func Parse(data []byte, opts *Options) (*File, error) {
	p := &parser{opts: opts.withDefaults()}
	f := p.file(data)
	if len(p.problems) > 0 {
		return nil, &LoadError{Problems: p.problems}
	}
	for _, t := range f.Tools {
		t.Spec.Binding = t.binding() // of a checked tool only: every template parsed
	}
	f.Warnings = p.warnings
	return f, nil
}

type parser struct {
	opts     Options
	problems []Problem
	warnings []Problem
	tool     string // current tool, for problems
}

// secret warns when a header or variable named like a credential has a
// literal value in the file (tools.LiteralSecret).
func (p *parser) secret(field, kind, name, value string) {
	if tools.LiteralSecret(name, value) {
		p.warnings = append(p.warnings, Problem{Tool: p.tool, Field: field, Msg: fmt.Sprintf(
			"%s %s looks like a credential typed into the tools file: anyone who can read the file (or a tools listing) sees it; "+
				"put it in the environment and write {{env \"NAME\"}} (it is masked when shown)", kind, name)})
	}
}

func (p *parser) add(field, format string, a ...any) {
	p.problems = append(p.problems, Problem{Tool: p.tool, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// object decodes raw as a JSON object, reports unknown keys and missing
// required ones, and returns its members.
func (p *parser) object(raw json.RawMessage, where string, known, required []string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		p.add(where, "must be a JSON object")
		return nil
	}
	var unknown []string
	for k := range m {
		if !contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		p.add(join(where, k), "unknown field (known: %s)", strings.Join(known, ", "))
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			p.add(join(where, k), "missing")
		}
	}
	return m
}

func join(where, field string) string {
	if where == "" {
		return field
	}
	return where + "." + field
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) str(m map[string]json.RawMessage, where, key string) string {
	raw, ok := m[key]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.add(join(where, key), "must be a string")
	}
	return s
}

func (p *parser) duration(m map[string]json.RawMessage, where, key string) time.Duration {
	s := p.str(m, where, key)
	if s == "" {
		if _, ok := m[key]; ok {
			p.add(join(where, key), `empty duration (want one such as "30s", "2h" or "30d")`)
		}
		return 0
	}
	d, err := plan.ParseDuration(s)
	if err != nil {
		p.add(join(where, key), "%v", err)
		return 0
	}
	return d
}

func (p *parser) strMap(m map[string]json.RawMessage, where, key string) map[string]string {
	raw, ok := m[key]
	if !ok {
		return nil
	}
	var out map[string]string
	if err := json.Unmarshal(raw, &out); err != nil {
		p.add(join(where, key), "must be an object of strings")
	}
	return out
}

var fileFields = []string{"version", "tools", "mcp_servers", "policy", "budgets", "$schema"}

var toolFields = []string{"name", "description", "effect", "input_schema", "output_schema", "request", "output",
	"timeout", "key_header", "key_ttl", "lookup", "visibility_lag", "approval", "approve_above", "compensate", "policy", "retry", "max_in_flight", "rate"}

func (p *parser) file(data []byte) *File {
	top := p.object(data, "", fileFields, []string{"version", "tools"})
	if top == nil {
		if !json.Valid(data) {
			p.problems = []Problem{{Msg: "not valid JSON: " + jsonErr(data)}}
		}
		return nil
	}
	f := &File{}
	if raw, ok := top["version"]; ok {
		if err := json.Unmarshal(raw, &f.Version); err != nil || f.Version != 1 {
			p.add("version", "unsupported version %s (want 1)", raw)
		}
	}
	var rawTools []json.RawMessage
	if raw, ok := top["tools"]; ok {
		if err := json.Unmarshal(raw, &rawTools); err != nil {
			p.add("tools", "must be an array of tools")
		}
	}
	var rawServers []json.RawMessage
	if raw, ok := top["mcp_servers"]; ok {
		if err := json.Unmarshal(raw, &rawServers); err != nil {
			p.add("mcp_servers", "must be an array")
		}
	}
	servers := map[string]bool{}
	for i, raw := range rawServers {
		if s, ok := p.server(i, raw); ok {
			if servers[s.Name] {
				p.add(fmt.Sprintf("mcp_servers[%d].name", i), "duplicate server name %q", s.Name)
			}
			servers[s.Name] = true
			f.MCPServers = append(f.MCPServers, s)
		}
	}
	if raw, ok := top["policy"]; ok {
		p.tool = ""
		f.Policy = p.rules(raw, "policy", "")
	}
	var defs []*Tool
	names := map[string]bool{}
	for i, raw := range rawTools {
		d := p.toolDef(i, raw)
		if d == nil {
			continue
		}
		if names[d.Spec.Name] {
			p.tool = fmt.Sprintf("%q", d.Spec.Name)
			p.add("name", "duplicate tool name")
		}
		names[d.Spec.Name] = true
		defs = append(defs, d)
	}
	// Compensation targets are known only now.
	known := func(name string) bool {
		if names[name] {
			return true
		}
		srv, _, ok := strings.Cut(name, ".")
		return ok && servers[srv]
	}
	for _, d := range defs {
		if c := d.Spec.Compensate; c != nil && c.Tool != "" && !known(c.Tool) {
			p.tool = fmt.Sprintf("%q", d.Spec.Name)
			p.add("compensate.tool", "unknown tool %q", c.Tool)
		}
	}
	for _, s := range f.MCPServers {
		for name, t := range s.Tools {
			if c := t.Compensate; c != nil && !known(c.Tool) {
				p.tool = ""
				p.add(fmt.Sprintf("mcp_servers.%s.tools.%s.compensate.tool", s.Name, name), "unknown tool %q", c.Tool)
			}
		}
	}
	if raw, ok := top["budgets"]; ok {
		p.tool = ""
		f.Budgets = p.budgets(raw, "", known)
	}
	f.Tools = append(f.Tools, defs...)
	return f
}

// jsonErr describes why data is not JSON, with the line and column of a
// syntax error (counted in bytes from 1, as editors do for ASCII).
func jsonErr(data []byte) string {
	var v any
	err := json.Unmarshal(data, &v)
	if se, ok := err.(*json.SyntaxError); ok {
		off := se.Offset // just past the byte that is wrong
		if off > 0 && se.Error() != "unexpected end of JSON input" {
			off--
		}
		line, col := Position(data, off)
		return fmt.Sprintf("%v (line %d, column %d)", se, line, col)
	}
	if err != nil {
		return err.Error()
	}
	return "unknown error"
}

// Position returns the line and column (both from 1) of the byte at offset
// in data; an offset past the end is the position just after the last byte.
func Position(data []byte, offset int64) (line, col int) {
	off := int(min(max(offset, 0), int64(len(data))))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = off - bytes.LastIndexByte(before, '\n')
	return line, col
}

var (
	methods      = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
	headerName   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	numericTypes = []string{"number", "integer"}
)

func (p *parser) toolDef(i int, raw json.RawMessage) *Tool {
	p.tool = fmt.Sprintf("#%d", i+1)
	var named struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &named) == nil && named.Name != "" {
		p.tool = fmt.Sprintf("%q", named.Name)
	}
	m := p.object(raw, "", toolFields, []string{"name", "effect", "input_schema", "request"})
	if m == nil {
		return nil
	}
	d := &Tool{Env: map[string]string{}}
	s := &d.Spec
	s.Name = p.str(m, "", "name")
	if s.Name != "" {
		p.tool = fmt.Sprintf("%q", s.Name)
		if strings.ContainsAny(s.Name, ". \t\n") || strings.Contains(s.Name, "${") {
			p.add("name", "must not contain '.', whitespace or \"${\"")
		}
	} else if _, ok := m["name"]; ok {
		p.add("name", "empty")
	}
	s.Description = p.str(m, "", "description")
	if raw, ok := m["effect"]; ok {
		var c string
		if err := json.Unmarshal(raw, &c); err != nil || !tools.Class(c).Valid() {
			p.add("effect", "unknown effect %s (want one of %s)", raw, classNames())
		}
		s.Class = tools.Class(c)
	}
	props := p.inputSchema(m, s)
	if raw, ok := m["output_schema"]; ok {
		if err := compileSchema(raw); err != nil {
			p.add("output_schema", "%v", err)
		}
		s.OutputSchema = raw
	}
	s.Timeout = p.duration(m, "", "timeout")
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	s.KeyTTL = p.duration(m, "", "key_ttl")
	s.VisibilityLag = p.duration(m, "", "visibility_lag")

	if raw, ok := m["request"]; ok {
		d.Request = p.request(raw, "request", props, d.Env, false)
	}
	d.Output = p.pointer(m, "", "output")
	d.KeyHeader = p.str(m, "", "key_header")
	if d.KeyHeader != "" {
		if !headerName.MatchString(d.KeyHeader) {
			p.add("key_header", "invalid header name %q", d.KeyHeader)
		}
		if s.Class != tools.Keyed {
			p.add("key_header", "only a keyed tool sends its key in a header (effect is %q); use {{key}} in a header or the body to send it anyway", s.Class)
		}
	}
	if _, ok := m["key_ttl"]; ok && s.Class != tools.Keyed {
		p.add("key_ttl", "only meaningful for effect keyed (effect is %q)", s.Class)
	}
	if raw, ok := m["lookup"]; ok {
		if s.Class != tools.Lookup && s.Class != tools.Keyed {
			p.add("lookup", "a lookup block needs effect lookup (or keyed, for calls past key_ttl); effect is %q", s.Class)
		}
		d.Lookup = p.lookup(raw, props, d.Env)
	} else if s.Class == tools.Lookup {
		p.add("lookup", "effect lookup needs a lookup block")
	}
	if d.Lookup != nil {
		p.warnExtraArgs(s.InputSchema, d.Request, d.Lookup.Request)
	} else {
		p.warnExtraArgs(s.InputSchema, d.Request)
	}
	if s.Class == tools.Keyed && d.KeyHeader == "" && d.Request != nil && !d.Request.sendsKey() {
		p.add("key_header", "effect keyed but the key is never sent: set key_header or use {{key}} in the request")
	}
	if raw, ok := m["approval"]; ok {
		var a string
		if err := json.Unmarshal(raw, &a); err != nil || (a != "always" && a != "never") {
			p.add("approval", `must be "always" or "never", got %s`, raw)
		}
		s.Approval.Always = a == "always"
	}
	if raw, ok := m["approve_above"]; ok {
		s.Approval.Above = p.approveAbove(raw, "approve_above", props)
	}
	if raw, ok := m["compensate"]; ok {
		s.Compensate = p.compensate(raw, "compensate", props)
	}
	if raw, ok := m["policy"]; ok {
		s.Policy = p.rules(raw, "policy", fmt.Sprintf("tool %q ", s.Name))
	}
	if raw, ok := m["retry"]; ok {
		s.Retry = p.retry(raw, "retry")
	}
	s.Limits = p.limits(m, "")
	return d
}

func classNames() string {
	var s []string
	for _, c := range tools.Classes {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ")
}

// schemaProps are the input schema's top-level properties (name -> schema).
type schemaProps map[string]json.RawMessage

func (p *parser) inputSchema(m map[string]json.RawMessage, s *tools.Spec) schemaProps {
	raw, ok := m["input_schema"]
	if !ok {
		return nil
	}
	s.InputSchema = raw
	var top struct {
		Type       any                        `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		p.add("input_schema", "must be a JSON Schema object with \"type\": \"object\"")
		return nil
	}
	if top.Type != "object" {
		p.add("input_schema", `not an object schema (want "type": "object" at the top)`)
	}
	if err := compileSchema(raw); err != nil {
		p.add("input_schema", "%v", err)
	}
	if top.Properties == nil {
		return schemaProps{}
	}
	return top.Properties
}

func compileSchema(raw json.RawMessage) error { return tools.CheckSchema(raw) }

func (p *parser) pointer(m map[string]json.RawMessage, where, key string) string {
	s := p.str(m, where, key)
	if _, err := SplitPointer(s); err != nil {
		p.add(join(where, key), "%v", err)
	}
	return s
}

var requestFields = []string{"method", "url", "headers", "body"}
var lookupFields = []string{"method", "url", "headers", "body", "found", "output"}

func (p *parser) request(raw json.RawMessage, where string, props schemaProps, env map[string]string, isLookup bool) *Request {
	known := requestFields
	if isLookup {
		known = lookupFields
	}
	m := p.object(raw, where, known, []string{"method", "url"})
	if m == nil {
		return nil
	}
	r := &Request{Method: p.str(m, where, "method")}
	if _, ok := m["method"]; ok && !contains(methods, r.Method) {
		p.add(join(where, "method"), "unsupported method %q (want one of %s)", r.Method, strings.Join(methods, ", "))
	}
	urlSrc := p.str(m, where, "url")
	if _, ok := m["url"]; ok {
		t, err := ParseURLTemplate(urlSrc)
		if err != nil {
			p.add(join(where, "url"), "%v", err)
		} else {
			r.URL = t
			p.useTemplate(t, join(where, "url"), props, env)
			p.checkURL(r, join(where, "url"), env)
			p.warnOrigin(t, join(where, "url"), env)
			for _, q := range queryParams(urlSrc) {
				p.secret(join(where, "url"), "query parameter", q.name, q.value)
			}
		}
	}
	hdrs := p.strMap(m, where, "headers")
	for _, name := range sortedKeys(hdrs) {
		v := hdrs[name]
		hw := join(where, "headers."+name)
		if !headerName.MatchString(name) {
			p.add(hw, "invalid header name")
			continue
		}
		t, err := ParseTemplate(v)
		if err != nil {
			p.add(hw, "%v", err)
			continue
		}
		p.useTemplate(t, hw, props, env)
		p.secret(hw, "header", name, v)
		r.Headers = append(r.Headers, Header{Name: http.CanonicalHeaderKey(name), Value: t})
	}
	sort.Slice(r.Headers, func(i, j int) bool { return r.Headers[i].Name < r.Headers[j].Name })
	if raw, ok := m["body"]; ok {
		if r.Method == "GET" || r.Method == "HEAD" {
			p.add(join(where, "body"), "a %s request has no body", r.Method)
		}
		v, err := tools.DecodeJSON(raw)
		if err != nil {
			p.add(join(where, "body"), "not valid JSON: %v", err)
		} else {
			r.Body = p.bodyTemplate(v, join(where, "body"), props, env)
			r.HasBody = true
			r.BodySrc = raw
		}
	}
	return r
}

func (p *parser) bodyTemplate(v any, where string, props schemaProps, env map[string]string) any {
	switch v := v.(type) {
	case string:
		t, err := ParseTemplate(v)
		if err != nil {
			p.add(where, "%v", err)
			return v
		}
		p.useTemplate(t, where, props, env)
		return t
	case map[string]any:
		for k, x := range v {
			v[k] = p.bodyTemplate(x, where+"."+k, props, env)
		}
	case []any:
		for i, x := range v {
			v[i] = p.bodyTemplate(x, fmt.Sprintf("%s[%d]", where, i), props, env)
		}
	}
	return v
}

// useTemplate checks the fields a template names against the input schema
// and reads the environment variables it uses.
func (p *parser) useTemplate(t *Template, where string, props schemaProps, env map[string]string) {
	for _, f := range t.Fields() {
		if props == nil {
			continue // the input schema itself is broken; reported already
		}
		if err := props.has(f); err != nil {
			p.add(where, "template %q: %v", t.src, err)
		}
	}
	for _, name := range t.Envs() {
		if p.opts.NoEnv {
			break
		}
		if _, ok := env[name]; ok {
			continue
		}
		v := p.opts.Env(name)
		if v == "" {
			p.add(where, "environment variable %s is not set", name)
			continue
		}
		env[name] = v
	}
}

// has checks that path names a property of the input schema (descending into
// nested object schemas that declare properties).
func (sp schemaProps) has(path []string) error {
	props := sp
	for i, name := range path {
		raw, ok := props[name]
		if !ok {
			return fmt.Errorf("the input schema has no field %q", strings.Join(path[:i+1], "."))
		}
		var sub struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		_ = json.Unmarshal(raw, &sub)
		if sub.Properties == nil {
			return nil // not described further: accept deeper paths
		}
		props = sub.Properties
	}
	return nil
}

// warnOrigin warns about a URL template that does not fix its origin before
// its first argument (Template.OriginFixed).
func (p *parser) warnOrigin(t *Template, where string, env map[string]string) {
	if t.OriginFixed(env) {
		return
	}
	vars := t.Envs()
	for i, v := range vars {
		vars[i] = fmt.Sprintf("{{env %q}}", v)
	}
	p.warnings = append(p.warnings, Problem{Tool: p.tool, Field: where, Msg: fmt.Sprintf(
		"the URL's origin is not fixed in the file: its scheme and host come from %s, and an argument follows before a \"/\" ends them, "+
			"so an argument could change the host, the port or the user information (\"@other-host\", \":8080\", \".other.org\") and send the request, headers included, elsewhere; "+
			"docket refuses such calls (nothing is sent), but write the URL so that a \"/\" follows the origin before any argument "+
			"(%s/path/{{.field}}, with the variable holding only scheme://host[:port]), or write the origin itself in the file",
		strings.Join(vars, " and "), cmpOr(vars, `{{env "BASE"}}`))})
}

func cmpOr(vars []string, dflt string) string {
	if len(vars) > 0 {
		return vars[0]
	}
	return dflt
}

// warnExtraArgs warns about a request that sends the arguments themselves as
// its body while the input schema lets the model add properties.
func (p *parser) warnExtraArgs(schema json.RawMessage, reqs ...*Request) {
	var sends []string
	for i, r := range reqs {
		if r.SendsArgs() {
			sends = append(sends, []string{"request", "lookup"}[i])
		}
	}
	if len(sends) == 0 || !extraPropsAllowed(schema) {
		return
	}
	which := strings.Join(sends, " and ")
	var msg string
	if _, open := InputNames(schema); open {
		msg = "allows properties it does not declare (\"additionalProperties\" is not false, or it declares no properties), " +
			"and the " + which + " has no body template, so the arguments themselves are its body: whatever the model adds reaches the service unchecked " +
			"(a policy or approval limit sees only the names it checks); declare the properties and set \"additionalProperties\": false, or write a body template"
	} else {
		msg = "does not set \"additionalProperties\": false, and the " + which + " has no body template, so the arguments themselves are its body: " +
			"docket refuses a call with an argument the schema does not declare (nothing is sent), after the plan was accepted and perhaps approved; " +
			"set \"additionalProperties\": false so that such a plan is refused when it is checked"
	}
	p.warnings = append(p.warnings, Problem{Tool: p.tool, Field: "input_schema", Msg: msg})
}

// checkURL renders the URL with placeholder values and checks it parses as
// an absolute http(s) URL. The message never shows the rendered URL (it may
// hold environment values).
func (p *parser) checkURL(r *Request, where string, env map[string]string) {
	args := map[string]any{}
	for _, f := range r.URL.Fields() {
		cur := args
		for _, seg := range f[:len(f)-1] {
			next, _ := cur[seg].(map[string]any)
			if next == nil {
				next = map[string]any{}
				cur[seg] = next
			}
			cur = next
		}
		cur[f[len(f)-1]] = "x"
	}
	for _, name := range r.URL.Envs() {
		if _, ok := env[name]; !ok {
			return // reported already
		}
	}
	s := r.URL.RenderURL(&Data{Args: args, Key: "k", Env: env})
	u, err := url.Parse(s)
	switch {
	case err != nil:
		p.add(where, "bad URL %q: does not parse", r.URL.src)
	case u.Scheme != "http" && u.Scheme != "https":
		p.add(where, "bad URL %q: want an http or https URL", r.URL.src)
	case u.Host == "":
		p.add(where, "bad URL %q: no host", r.URL.src)
	case u.User != nil:
		p.add(where, "bad URL %q: credentials in the URL are not allowed (use a header with {{env}})", r.URL.src)
	}
}

func (p *parser) lookup(raw json.RawMessage, props schemaProps, env map[string]string) *Lookup {
	r := p.request(raw, "lookup", props, env, true)
	if r == nil {
		return nil
	}
	m := p.object(raw, "lookup", lookupFields, []string{"found"})
	p.problems = dedupe(p.problems)
	l := &Lookup{Request: r, Found: p.str(m, "lookup", "found")}
	if _, ok := m["found"]; ok && l.Found != "nonempty" && l.Found != "status_200" {
		p.add("lookup.found", `must be "nonempty" or "status_200", got %q`, l.Found)
	}
	l.Output = p.pointer(m, "lookup", "output")
	return l
}

func dedupe(ps []Problem) []Problem {
	seen := map[Problem]bool{}
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func (p *parser) approveAbove(raw json.RawMessage, where string, props schemaProps) map[string]json.Number {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		p.add(where, "must be an object of argument name to number")
		return nil
	}
	out := map[string]json.Number{}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		n, ok := m[name].(json.Number)
		if !ok {
			p.add(where+"."+name, "limit must be a number, got %s", tools.JSONKind(m[name]))
			continue
		}
		out[name] = n
		if props == nil {
			continue
		}
		sch, ok := props[name]
		if !ok {
			p.add(where+"."+name, "the input schema has no field %q", name)
			continue
		}
		if !numericSchema(sch) {
			p.add(where+"."+name, "field %q is not numeric in the input schema (want \"type\": \"number\" or \"integer\")", name)
		}
	}
	return out
}

func numericSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	switch t := s.Type.(type) {
	case string:
		return contains(numericTypes, t)
	case []any:
		for _, x := range t {
			if x != "null" && !contains(numericTypes, fmt.Sprint(x)) {
				return false
			}
		}
		return len(t) > 0
	}
	return false
}

func (p *parser) compensate(raw json.RawMessage, where string, props schemaProps) *tools.Compensation {
	m := p.object(raw, where, []string{"tool", "args"}, []string{"tool", "args"})
	if m == nil {
		return nil
	}
	c := &tools.Compensation{Tool: p.str(m, where, "tool"), Args: m["args"]}
	if c.Args == nil {
		c.Args = json.RawMessage(`{}`)
	}
	if err := c.Check(); err != nil {
		p.add(join(where, "args"), "%v", err)
		return c
	}
	if props != nil {
		for _, path := range c.InputPaths() {
			if err := props.has(path[:1]); err != nil {
				p.add(join(where, "args"), "${input.%s}: %v", strings.Join(path, "."), err)
			}
		}
	}
	return c
}

var serverFields = []string{"name", "command", "args", "env", "url", "headers", "trust_annotations", "tools"}
var mcpToolFields = []string{"effect", "timeout", "key_ttl", "visibility_lag", "approval", "approve_above", "compensate", "output", "lookup", "policy", "retry", "max_in_flight", "rate"}
var mcpLookupFields = []string{"tool", "args", "found", "output"}

// mcpLookup parses an MCP tool's lookup block.
func (p *parser) mcpLookup(raw json.RawMessage, where string) *MCPLookup {
	m := p.object(raw, where, mcpLookupFields, []string{"tool", "found"})
	if m == nil {
		return nil
	}
	l := &MCPLookup{Tool: p.str(m, where, "tool"), Args: m["args"], Found: p.str(m, where, "found")}
	if _, ok := m["tool"]; ok && (l.Tool == "" || strings.ContainsAny(l.Tool, " \t\n")) {
		p.add(join(where, "tool"), "must name a tool of the same server")
	}
	if _, ok := m["found"]; ok && l.Found != "nonempty" {
		p.add(join(where, "found"), `must be "nonempty", got %q`, l.Found)
	}
	if l.Args == nil {
		l.Args = json.RawMessage(`{}`)
	}
	c := tools.Compensation{Tool: l.Tool, Args: l.Args}
	if err := c.Check(); err != nil {
		p.add(join(where, "args"), "%v", err)
	} else if bytes.Contains(l.Args, []byte("${output")) {
		p.add(join(where, "args"), "a lookup may use only ${input...}: it runs before there is an output")
	}
	l.Output = p.pointer(m, where, "output")
	return l
}

func (p *parser) server(i int, raw json.RawMessage) (MCPServer, bool) {
	p.tool = ""
	where := fmt.Sprintf("mcp_servers[%d]", i)
	m := p.object(raw, where, serverFields, []string{"name"})
	if m == nil {
		return MCPServer{}, false
	}
	var s MCPServer
	s.Name = p.str(m, where, "name")
	if _, ok := m["name"]; ok && (s.Name == "" || strings.ContainsAny(s.Name, ". \t\n")) {
		p.add(join(where, "name"), "must be non-empty without '.' or whitespace")
	}
	s.Command = p.str(m, where, "command")
	s.URL = p.str(m, where, "url")
	if (s.Command == "") == (s.URL == "") {
		p.add(where, "needs exactly one of command and url")
	}
	if raw, ok := m["args"]; ok {
		if err := json.Unmarshal(raw, &s.Args); err != nil {
			p.add(join(where, "args"), "must be an array of strings")
		}
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add(join(where, "url"), "bad URL %q: want an absolute http or https URL", s.URL)
		}
	}
	s.Env = p.strMap(m, where, "env")
	s.Headers = p.strMap(m, where, "headers")
	for _, kind := range []string{"env", "headers"} {
		vals := map[string]map[string]string{"env": s.Env, "headers": s.Headers}[kind]
		for _, k := range sortedKeys(vals) {
			v := vals[k]
			if p.opts.NoEnv {
				if _, err := ExpandEnv(v, func(string) string { return "set" }); err != nil {
					p.add(join(where, kind+"."+k), "%v", err)
				}
			} else if _, err := ExpandEnv(v, p.opts.Env); err != nil {
				p.add(join(where, kind+"."+k), "%v", err)
			}
			what := map[string]string{"env": "variable", "headers": "header"}[kind]
			p.secret(join(where, kind+"."+k), what, k, v)
		}
	}
	if raw, ok := m["trust_annotations"]; ok {
		if err := json.Unmarshal(raw, &s.TrustAnnotations); err != nil {
			p.add(join(where, "trust_annotations"), "must be true or false")
		}
	}
	if raw, ok := m["tools"]; ok {
		var ts map[string]json.RawMessage
		if err := json.Unmarshal(raw, &ts); err != nil {
			p.add(join(where, "tools"), "must be an object of tool name to classification")
		}
		s.Tools = map[string]MCPTool{}
		for name, traw := range ts {
			tw := join(where, "tools."+name)
			tm := p.object(traw, tw, mcpToolFields, []string{"effect"})
			if tm == nil {
				continue
			}
			var t MCPTool
			eff := p.str(tm, tw, "effect")
			if _, ok := tm["effect"]; ok && !tools.Class(eff).Valid() {
				p.add(join(tw, "effect"), "unknown effect %q (want one of %s)", eff, classNames())
			}
			t.Effect = tools.Class(eff)
			t.Timeout = p.duration(tm, tw, "timeout")
			t.KeyTTL = p.duration(tm, tw, "key_ttl")
			t.VisibilityLag = p.duration(tm, tw, "visibility_lag")
			if a, ok := tm["approval"]; ok {
				var v string
				if err := json.Unmarshal(a, &v); err != nil || (v != "always" && v != "never") {
					p.add(join(tw, "approval"), `must be "always" or "never", got %s`, a)
				}
				t.Approval.Always = v == "always"
			}
			if a, ok := tm["approve_above"]; ok {
				t.Approval.Above = p.approveAbove(a, join(tw, "approve_above"), nil)
			}
			if c, ok := tm["compensate"]; ok {
				t.Compensate = p.compensate(c, join(tw, "compensate"), nil)
			}
			t.Output = p.pointer(tm, tw, "output")
			if l, ok := tm["lookup"]; ok {
				t.Lookup = p.mcpLookup(l, join(tw, "lookup"))
				if t.Effect != tools.Lookup && t.Effect != tools.Keyed {
					p.add(join(tw, "lookup"), "a lookup is allowed only with effect %q or %q", tools.Lookup, tools.Keyed)
				}
			} else if t.Effect == tools.Lookup {
				p.add(join(tw, "lookup"), "missing (effect %q needs a lookup)", tools.Lookup)
			}
			if raw, ok := tm["policy"]; ok {
				t.Policy = p.rules(raw, join(tw, "policy"), "")
			}
			if raw, ok := tm["retry"]; ok {
				t.Retry = p.retry(raw, join(tw, "retry"))
			}
			t.Limits = p.limits(tm, tw)
			s.Tools[name] = t
		}
	}
	return s, true
}

// sendsKey reports whether the request carries {{key}} anywhere.
func (r *Request) sendsKey() bool {
	if r.URL != nil && r.URL.HasKey() {
		return true
	}
	for _, h := range r.Headers {
		if h.Value.HasKey() {
			return true
		}
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case *Template:
			return v.HasKey()
		case map[string]any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		case []any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		}
		return false
	}
	return walk(r.Body)
}
