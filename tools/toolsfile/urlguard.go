package toolsfile

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrURLArgument is wrapped by the errors of RenderGuardedURL: an argument
// (or the key) would have changed where a request goes, or made a dot or
// empty segment of its path. Nothing may be sent: the same arguments would
// be refused again.
var ErrURLArgument = errors.New("an argument may not change where the request goes")

// URLArgError says which argument RenderGuardedURL refused and why. Its text
// never quotes an environment value or the rendered URL.
type URLArgError struct {
	Arg    string // "customer.id", or "key" for {{key}}
	Reason string
}

func (e *URLArgError) Error() string {
	what := fmt.Sprintf("argument %q", e.Arg)
	if e.Arg == "key" {
		what = "the key"
	}
	return what + " " + e.Reason
}

func (e *URLArgError) Unwrap() error { return ErrURLArgument }

// span is where one action's value landed in a rendered template.
type span struct {
	start, end int
	p          *part
}

// name is the argument a span comes from, as the file writes it.
func (s span) name() string {
	if s.p.kind == keyPart {
		return "key"
	}
	return strings.Join(s.p.field, ".")
}

// renderSpans is Render that also says where each argument's and the key's
// value landed.
func (t *Template) renderSpans(d *Data) (string, []span) {
	var b strings.Builder
	var spans []span
	for i := range t.parts {
		p := &t.parts[i]
		start := b.Len()
		t.renderPart(&b, p, d)
		if p.kind == fieldPart || p.kind == keyPart {
			spans = append(spans, span{start, b.Len(), p})
		}
	}
	return b.String(), spans
}

// RenderGuardedURL is RenderURL for sending: it refuses (an error wrapping
// ErrURLArgument, a *URLArgError naming the argument) a URL whose arguments
// or key
//   - change its scheme, user information, host or port: those must be what
//     the text before the first argument gives, the file's literal text
//     and environment values (so "{{env \"API\"}}{{.path}}" with path
//     "@other:8080", ":8080" or ".other.org" is refused);
//   - make a path segment that is empty or, once percent-decoded (twice, as
//     some proxies do), a dot segment: "." or "..", also with ";params", or
//     as one of its parts split at "/" or "\" (which a proxy may decode and
//     treat as separators).
//
// A "/" in an argument is escaped (%2F) and never starts a new segment.
func (t *Template) RenderGuardedURL(d *Data) (string, error) {
	raw, spans := t.renderSpans(d)
	out := finishURL(raw)
	if len(spans) == 0 {
		return out, nil // the file's text and the environment only
	}
	fixed, err := originOf(raw[:spans[0].start])
	if err != nil {
		return "", &URLArgError{Arg: spans[0].name(), Reason: "follows text that is not yet a URL's scheme and host: refused, nothing sent"}
	}
	u, err := url.Parse(out)
	if err != nil || !sameOrigin(u, fixed) {
		return "", &URLArgError{Arg: originCulprit(raw, spans, fixed).name(),
			Reason: "would change the scheme, host or port the request goes to (they are fixed by the tools file and its environment): refused, nothing sent"}
	}
	return out, checkSegments(raw, spans)
}

// finishURL is the query processing of RenderURL.
func finishURL(s string) string {
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

// authorityEnd returns where the authority of the URL s ends (the index of
// the "/", "?" or "#" after "scheme://host"), or -1 when s does not close it.
func authorityEnd(s string) int {
	i := strings.Index(s, "://")
	if i < 0 {
		return -1
	}
	j := strings.IndexAny(s[i+3:], "/?#")
	if j < 0 {
		return -1
	}
	return i + 3 + j
}

// originOf parses the scheme, user information and host of prefix, the
// rendered text before the first argument: up to where it closes the
// authority, or all of it.
func originOf(prefix string) (*url.URL, error) {
	if e := authorityEnd(prefix); e >= 0 {
		prefix = prefix[:e]
	}
	u, err := url.Parse(prefix)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "" || u.Opaque != "" {
		return nil, errors.New("no scheme and host")
	}
	return u, nil
}

func sameOrigin(u, fixed *url.URL) bool {
	return u.Scheme == fixed.Scheme && u.Opaque == "" && u.User == nil && fixed.User == nil && u.Host == fixed.Host
}

// originCulprit is the first argument after which the URL so far no longer
// has the fixed origin (the first one when none alone does).
func originCulprit(raw string, spans []span, fixed *url.URL) span {
	for _, s := range spans {
		u, err := url.Parse(strings.ReplaceAll(raw[:s.end], "\x00", ""))
		if err != nil || !sameOrigin(u, fixed) {
			return s
		}
	}
	return spans[0]
}

// checkSegments refuses a path segment that an argument (or the key) made
// empty or a dot segment. raw is the rendered URL before query processing;
// its origin has been checked.
func checkSegments(raw string, spans []span) error {
	pathStart := authorityEnd(raw)
	if pathStart < 0 {
		pathStart = len(raw)
	}
	pathEnd := len(raw)
	if q := strings.IndexAny(raw[pathStart:], "?#"); q >= 0 {
		pathEnd = pathStart + q
	}
	for _, s := range spans {
		if s.p.esc != escPath || s.start < pathStart || s.end > pathEnd {
			continue
		}
		segStart := pathStart
		if i := strings.LastIndexByte(raw[pathStart:s.start], '/'); i >= 0 {
			segStart = pathStart + i + 1
		}
		segEnd := pathEnd
		if i := strings.IndexByte(raw[s.end:pathEnd], '/'); i >= 0 {
			segEnd = s.end + i
		}
		if reason := badSegment(raw[segStart:segEnd]); reason != "" {
			return &URLArgError{Arg: s.name(), Reason: reason + ": refused, nothing sent"}
		}
	}
	return nil
}

// badSegment says what is wrong with one escaped path segment, or "".
func badSegment(seg string) string {
	if seg == "" {
		return "is empty, which leaves an empty segment in the URL path (\"/users//profile\" may reach another resource)"
	}
	for range 2 {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return "makes a URL path segment that does not decode"
		}
		for _, piece := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
			piece, _, _ = strings.Cut(piece, ";")
			if piece == "." || piece == ".." {
				return "makes a dot segment (\".\" or \"..\") in the URL path, which servers and proxies resolve to another path"
			}
		}
		if dec == seg {
			break
		}
		seg = dec
	}
	return ""
}

// OriginFixed reports whether the template fixes where the URL's scheme and
// host end before any argument or the key: its text must ("{{env \"BASE\"}}/v1/{{.id}}"
// does, "{{env \"BASE\"}}{{.path}}" does not: the argument follows the
// environment value directly and could extend its host or add a port or
// user information), and so must the text rendered with env when env holds
// the values the template uses (BASE="https:" with "{{env \"BASE\"}}//{{.host}}"
// does not). RenderGuardedURL refuses the calls whose arguments would change
// the origin either way; this is for warning about such templates.
func (t *Template) OriginFixed(env map[string]string) bool {
	const mark = "env://h" // an environment value, as far as the text can tell
	var skel, rendered strings.Builder
	known := true
	for _, p := range t.parts {
		switch p.kind {
		case litPart:
			skel.WriteString(p.lit)
			rendered.WriteString(p.lit)
			continue
		case envPart:
			skel.WriteString(mark)
			v, ok := env[p.env]
			known = known && ok
			rendered.WriteString(v)
			continue
		}
		s := skel.String()
		var byText bool
		if strings.HasPrefix(s, mark) {
			byText = strings.ContainsAny(s[len(mark):], "/?#")
		} else {
			byText = authorityEnd(s) >= 0
		}
		return byText && (!known || authorityEnd(rendered.String()) >= 0)
	}
	return true
}
