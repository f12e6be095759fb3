package httptool

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// A template is text with actions in double braces:
//
//	{{.field}}       the argument named field ({{.a.b}} for a nested field)
//	{{key}}          the action's idempotency key
//	{{env "NAME"}}   the environment variable NAME, read when the file is loaded
//
// Nothing else is allowed inside braces. Templates are parsed once, at load.
type template struct {
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

// parseTemplate parses s. Errors quote the template (which never holds a
// secret: secrets come from {{env}} and are only read later).
func parseTemplate(s string) (*template, error) {
	t := &template{src: s}
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

// single reports whether t is exactly one action and nothing else.
func (t *template) single() (part, bool) {
	if len(t.parts) == 1 && t.parts[0].kind != litPart {
		return t.parts[0], true
	}
	return part{}, false
}

func (t *template) hasKey() bool {
	for _, p := range t.parts {
		if p.kind == keyPart {
			return true
		}
	}
	return false
}

// renderData is what a template is rendered with.
type renderData struct {
	args map[string]any    // decoded arguments (numbers as json.Number)
	key  string            // action key
	env  map[string]string // values read at load
}

// lookupField returns the argument at path; ok is false when it is absent.
func (d *renderData) lookupField(path []string) (any, bool) {
	var cur any = d.args
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

// render renders t as text, escaping each action's value as its part says.
func (t *template) render(d *renderData) string {
	var b strings.Builder
	for _, p := range t.parts {
		var s string
		switch p.kind {
		case litPart:
			b.WriteString(p.lit)
			continue
		case keyPart:
			s = d.key
		case envPart:
			s = d.env[p.env]
		case fieldPart:
			v, ok := d.lookupField(p.field)
			if !ok && p.esc == escQuery {
				b.WriteByte(absentMark) // see dropAbsent
				continue
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
	return b.String()
}

// absentMark stands for an absent argument in a URL query while rendering;
// it cannot come from a value (query escaping turns a NUL into %00).
const absentMark = 0

// renderURL renders a URL template. In the query, a parameter whose value is
// exactly an absent argument ("&limit={{.limit}}" without limit) is left out;
// an absent argument inside other text is empty.
func (t *template) renderURL(d *renderData) string {
	s := t.render(d)
	if strings.IndexByte(s, absentMark) < 0 {
		return s
	}
	q := strings.IndexByte(s, '?')
	if q < 0 {
		return strings.ReplaceAll(s, "\x00", "")
	}
	base, query, frag := s[:q], s[q+1:], ""
	if h := strings.IndexByte(query, '#'); h >= 0 {
		query, frag = query[:h], query[h:]
	}
	var kept []string
	for _, param := range strings.Split(query, "&") {
		if k, v, ok := strings.Cut(param, "="); ok && v == "\x00" && k != "" {
			continue
		}
		kept = append(kept, strings.ReplaceAll(param, "\x00", ""))
	}
	out := base
	if len(kept) > 0 {
		out += "?" + strings.Join(kept, "&")
	}
	return out + strings.ReplaceAll(frag, "\x00", "")
}

// fields returns every argument path the template names.
func (t *template) fields() [][]string {
	var out [][]string
	for _, p := range t.parts {
		if p.kind == fieldPart {
			out = append(out, p.field)
		}
	}
	return out
}

// envs returns every environment variable the template reads.
func (t *template) envs() []string {
	var out []string
	for _, p := range t.parts {
		if p.kind == envPart {
			out = append(out, p.env)
		}
	}
	return out
}

// parseURLTemplate parses a URL template and decides how each action is
// escaped: an {{env}} at the very start, or inside the scheme and host, is
// inserted verbatim (a base URL from the environment); arguments and the key
// are refused there. In the path a value is one path segment (PathEscape: a
// "/" in it cannot change the path); after "?" it is query-escaped.
func parseURLTemplate(s string) (*template, error) {
	t, err := parseTemplate(s)
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
	t, err := parseTemplate(s)
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
	return t.render(&renderData{env: values}), nil
}
