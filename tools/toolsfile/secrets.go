package toolsfile

import (
	"net/url"
	"strings"

	"github.com/docketrun/docket/tools"
)

// queryParam is one "name=value" of a URL template's query, as written.
type queryParam struct {
	name, value string
	start, end  int // the value's place in the template's text
}

// queryParams splits the query of a URL template's text (after the first
// "?", up to a "#").
func queryParams(src string) []queryParam {
	q := strings.IndexByte(src, '?')
	if q < 0 {
		return nil
	}
	end := len(src)
	if h := strings.IndexByte(src[q:], '#'); h >= 0 {
		end = q + h
	}
	var out []queryParam
	pos := q + 1
	for _, param := range strings.Split(src[q+1:end], "&") {
		if k, v, ok := strings.Cut(param, "="); ok {
			name := k
			if u, err := url.QueryUnescape(k); err == nil {
				name = u
			}
			vs := pos + len(k) + 1
			out = append(out, queryParam{name: name, value: v, start: vs, end: vs + len(v)})
		}
		pos += len(param) + 1
	}
	return out
}

// MaskURL returns a URL template's text with every query value that types a
// credential into the file (a parameter named like one, tools.LiteralSecret)
// replaced by tools.Mask: "https://h/x?api_key=abc" shows as
// "https://h/x?api_key=••••".
func MaskURL(src string) string {
	params := queryParams(src)
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		if tools.LiteralSecret(p.name, p.value) {
			src = src[:p.start] + tools.Mask + src[p.end:]
		}
	}
	return src
}

// LiteralSecrets returns the credentials typed into the request's text: the
// literal words of header values, URL query values and body strings named
// like a credential (tools.LiteralSecretWords), each also unescaped when it
// is written escaped. For redacting them from errors and logs; the file's
// warnings already ask for {{env "NAME"}} instead.
func (r *Request) LiteralSecrets() []string {
	if r == nil {
		return nil
	}
	var out []string
	add := func(words []string) {
		for _, w := range words {
			out = append(out, w)
			if _, after, ok := strings.Cut(w, "="); ok && after != "" {
				out = append(out, after) // "session=abc": abc alone too
			}
			if u, err := url.QueryUnescape(w); err == nil && u != w {
				out = append(out, u)
			}
		}
	}
	for _, h := range r.Headers {
		add(tools.LiteralSecretWords(h.Name, h.Value.String()))
	}
	if r.URL != nil {
		for _, p := range queryParams(r.URL.String()) {
			add(tools.LiteralSecretWords(p.name, p.value))
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if t, ok := x.(*Template); ok {
					add(tools.LiteralSecretWords(k, t.String()))
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(r.Body)
	return out
}
