package toolsfile

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// A Template is text with actions in double braces:
//
//	{{.field}}       the argument named field ({{.a.b}} for a nested field)
//	{{key}}          the action's idempotency key
//	{{env "NAME"}}   the environment variable NAME, read when the file is loaded
//
// Nothing else is allowed inside braces. Templates are parsed once, at load.
type Template struct {
	src   string
	parts []part
}

type partKind int

const (
	litPart partKind = iota
	fieldPart
	keyPart
	envPart
)

type part struct {
	kind  partKind
	lit   string   // litPart
	field []string // fieldPart: path below the arguments
	env   string   // envPart: variable name
	esc   escaping // how the value is escaped (URLs only)
}

type escaping int

const (
	escNone  escaping = iota // headers, bodies: text as is
	escRaw                   // URL scheme/host from {{env}}: verbatim
	escPath                  // URL path segment
	escQuery                 // URL query or fragment
)

var (
	fieldSeg = regexp.MustCompile(`^[^\s.{}"]+$`)
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ParseTemplate parses s. Errors quote the Template (which never holds a
// secret: secrets come from {{env}} and are only read later).
func ParseTemplate(s string) (*Template, error) {
	t := &Template{src: s}
	rest := s
	offset := 0
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, part{kind: litPart, lit: rest})
			}
			return t, nil
		}
		if i > 0 {
			t.parts = append(t.parts, part{kind: litPart, lit: rest[:i]})
		}
		j := strings.Index(rest[i+2:], "}}")
		if j < 0 {
			return nil, fmt.Errorf("template %q: unclosed {{ at offset %d", s, offset+i)
		}
		inner := strings.TrimSpace(rest[i+2 : i+2+j])
		p, err := parseAction(inner)
		if err != nil {
			return nil, fmt.Errorf("template %q: {{%s}} at offset %d: %v", s, rest[i+2:i+2+j], offset+i, err)
		}
		t.parts = append(t.parts, p)
		offset += i + 2 + j + 2
		rest = rest[i+2+j+2:]
	}
}

func parseAction(inner string) (part, error) {
	switch {
	case inner == "key":
		return part{kind: keyPart}, nil
	case strings.HasPrefix(inner, "."):
		segs := strings.Split(inner[1:], ".")
		for _, sg := range segs {
			if !fieldSeg.MatchString(sg) {
				return part{}, fmt.Errorf("bad field name %q (want {{.field}} or {{.field.sub}})", sg)
			}
		}
		return part{kind: fieldPart, field: segs}, nil
	case inner == "env" || strings.HasPrefix(inner, "env ") || strings.HasPrefix(inner, "env\t"):
		arg := strings.TrimSpace(inner[3:])
		if len(arg) < 2 || arg[0] != '"' || arg[len(arg)-1] != '"' {
			return part{}, fmt.Errorf(`env needs a quoted variable name: {{env "NAME"}}`)
		}
		name := arg[1 : len(arg)-1]
		if !envName.MatchString(name) {
			return part{}, fmt.Errorf("bad environment variable name %q", name)
		}
		return part{kind: envPart, env: name}, nil
	}
	return part{}, fmt.Errorf(`unknown action (want {{.field}}, {{key}} or {{env "NAME"}})`)
}

// String returns the template as written (it never holds an environment
// value: those are read only when rendering).
func (t *Template) String() string { return t.src }

// Field reports whether t is exactly one {{.field}} action and nothing else,
// and returns its path. In a JSON body such a string becomes the argument's
// JSON value, type kept (see RenderBody).
func (t *Template) Field() ([]string, bool) {
	if len(t.parts) == 1 && t.parts[0].kind == fieldPart {
		return t.parts[0].field, true
	}
	return nil, false
}

// HasKey reports whether t uses {{key}}.
func (t *Template) HasKey() bool {
	for _, p := range t.parts {
		if p.kind == keyPart {
			return true
		}
	}
	return false
}

// Data is what a template is rendered with.
type Data struct {
	Args map[string]any    // decoded arguments (numbers as json.Number)
	Key  string            // the action's key
	Env  map[string]string // environment values read at load (Tool.Env)
}

// Field returns the argument at path; ok is false when it is absent.
func (d *Data) Field(path []string) (any, bool) {
	var cur any = d.Args
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// text renders one value as text: strings as they are, numbers and booleans
// as JSON, null or absent as "", objects and arrays as compact JSON.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return string(v)
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Render renders t as text: each action's value (an argument as text:
// strings as they are, numbers and booleans as JSON, absent or null as "",
// objects and arrays as compact JSON), escaped as its place in a URL says.
func (t *Template) Render(d *Data) string {
	var b strings.Builder
	for i := range t.parts {
		t.renderPart(&b, &t.parts[i], d)
	}
	return b.String()
}

// renderPart writes one part's text to b (see Render).
func (t *Template) renderPart(b *strings.Builder, p *part, d *Data) {
	var s string
	switch p.kind {
	case litPart:
		b.WriteString(p.lit)
		return
	case keyPart:
		s = d.Key
	case envPart:
		s = d.Env[p.env]
	case fieldPart:
		v, ok := d.Field(p.field)
		if !ok && p.esc == escQuery {
			b.WriteByte(absentMark) // see finishURL
			return
		}
		s = text(v)
	}
	switch p.esc {
	case escPath:
		s = url.PathEscape(s)
	case escQuery:
		s = url.QueryEscape(s)
	}
	b.WriteString(s)
}

// absentMark stands for an absent argument in a URL query while rendering;
// it cannot come from a value (query escaping turns a NUL into %00).
const absentMark = 0

// RenderURL renders a URL Template. In the query, a parameter whose value is
// exactly an absent argument ("&limit={{.limit}}" without limit) is left out;
// an absent argument inside other text is empty. It checks nothing: requests
// are built with RenderGuardedURL.
func (t *Template) RenderURL(d *Data) string {
	return finishURL(t.Render(d))
}

// Fields returns every argument path the Template names.
func (t *Template) Fields() [][]string {
	var out [][]string
	for _, p := range t.parts {
		if p.kind == fieldPart {
			out = append(out, p.field)
		}
	}
	return out
}

// Envs returns every environment variable the Template reads.
func (t *Template) Envs() []string {
	var out []string
	for _, p := range t.parts {
		if p.kind == envPart {
			out = append(out, p.env)
		}
	}
	return out
}

// ParseURLTemplate parses a URL Template and decides how each action is
// escaped: an {{env}} at the very start, or inside the scheme and host, is
// inserted verbatim (a base URL from the environment); arguments and the key
// are refused there. In the path a value is one path segment (PathEscape: a
// "/" in it cannot change the path); after "?" it is query-escaped.
func ParseURLTemplate(s string) (*Template, error) {
	t, err := ParseTemplate(s)
	if err != nil {
		return nil, err
	}
	var skel strings.Builder // the literal text so far, actions as "\x00"
	for i := range t.parts {
		p := &t.parts[i]
		if p.kind == litPart {
			skel.WriteString(p.lit)
			continue
		}
		p.esc = urlContext(skel.String())
		if p.esc == escRaw && p.kind != envPart {
			return nil, fmt.Errorf("template %q: arguments and {{key}} may not appear in the URL's scheme or host (only {{env}})", s)
		}
		skel.WriteByte(0)
	}
	return t, nil
}

// urlContext says where in a URL the text after prefix is.
func urlContext(prefix string) escaping {
	var rest string
	switch {
	case strings.HasPrefix(prefix, "\x00"):
		rest = prefix[1:] // a base URL from the environment ends where its action does
	case strings.Contains(prefix, "://"):
		afterScheme := prefix[strings.Index(prefix, "://")+3:]
		slash := strings.IndexAny(afterScheme, "/?#")
		if slash < 0 {
			return escRaw
		}
		rest = afterScheme[slash:]
	default:
		return escRaw
	}
	if strings.ContainsAny(rest, "?#") {
		return escQuery
	}
	return escPath
}

// ExpandEnv renders s, which may hold only literal text and {{env "NAME"}}
// actions (as in an MCP server's headers), with env. An unset variable is an
// error naming it.
func ExpandEnv(s string, env func(string) string) (string, error) {
	t, err := ParseTemplate(s)
	if err != nil {
		return "", err
	}
	values := map[string]string{}
	for _, p := range t.parts {
		switch p.kind {
		case envPart:
			v := env(p.env)
			if v == "" {
				return "", fmt.Errorf("environment variable %s is not set", p.env)
			}
			values[p.env] = v
		case fieldPart, keyPart:
			return "", fmt.Errorf("template %q: only {{env \"NAME\"}} is allowed here", s)
		}
	}
	return t.Render(&Data{Env: values}), nil
}

// RenderBody fills a body template (Request.Body): a string that is exactly one action
// becomes the value (an argument keeps its JSON type; an absent argument
// drops its object member, or is null in an array); other strings are text.
func RenderBody(v any, d *Data) any {
	switch v := v.(type) {
	case *Template:
		if path, ok := v.Field(); ok {
			x, _ := d.Field(path)
			return x
		}
		return v.Render(d)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if tm, ok := x.(*Template); ok {
				if path, ok := tm.Field(); ok {
					if _, present := d.Field(path); !present {
						continue
					}
				}
			}
			out[k] = RenderBody(x, d)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = RenderBody(x, d)
		}
		return out
	}
	return v
}

// SplitPointer parses an RFC 6901 JSON Pointer (an output or lookup output)
// into its reference tokens, unescaped; "" is the whole value (no tokens).
func SplitPointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("bad JSON pointer %q: must be empty or start with \"/\"", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, tk := range toks {
		for j := 0; j < len(tk); j++ {
			if tk[j] == '~' && (j+1 >= len(tk) || (tk[j+1] != '0' && tk[j+1] != '1')) {
				return nil, fmt.Errorf("bad JSON pointer %q: \"~\" must be followed by 0 or 1", p)
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(tk, "~1", "/"), "~0", "~")
	}
	return toks, nil
}
