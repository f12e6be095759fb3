package httptool

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// View is an HTTP tool's request and lookup as the tools file writes them,
// safe to show: templates as written ({{env "NAME"}} names a variable, never
// its value), and every header value, URL query value or body string that
// types a credential into the file (tools.LiteralSecret) replaced by
// tools.Mask.
type View struct {
	Request   RequestView `json:"request"`
	Output    string      `json:"output,omitempty"`
	KeyHeader string      `json:"key_header,omitempty"`
	Lookup    *LookupView `json:"lookup,omitempty"`
}

// RequestView is a request or lookup block as written, masked (see View).
type RequestView struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
}

// LookupView is a lookup block, with what it will do in words: what counts
// as found, what as not found, what is recorded.
type LookupView struct {
	RequestView
	Found   string   `json:"found"`
	Output  string   `json:"output,omitempty"`
	Explain []string `json:"explain"`
}

// View returns the tool as the file writes it, masked.
func (t *Tool) View() View {
	v := View{Request: view(t.def.Request), Output: t.def.Output}
	if t.def.KeyHeader != "" {
		v.KeyHeader = http.CanonicalHeaderKey(t.def.KeyHeader)
	}
	if l := t.def.Lookup; l != nil {
		v.Lookup = &LookupView{RequestView: view(l.Request), Found: l.Found, Output: l.Output,
			Explain: explainLookup(l, t.def.Output)}
	}
	return v
}

func view(r *toolsfile.Request) RequestView {
	if r == nil {
		return RequestView{}
	}
	v := RequestView{Method: r.Method, URL: toolsfile.MaskURL(r.URL.String())}
	if len(r.Headers) > 0 {
		v.Headers = map[string]string{}
		for _, h := range r.Headers {
			v.Headers[h.Name] = tools.MaskHeader(h.Name, h.Value.String())
		}
	}
	if len(r.BodySrc) > 0 {
		v.Body = maskBody(r.BodySrc)
	}
	return v
}

// maskBody masks the strings of a JSON body that type a credential into the
// file (a member named like one with a literal value).
func maskBody(raw json.RawMessage) json.RawMessage {
	doc, err := tools.DecodeJSON(raw)
	if err != nil {
		return nil
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && tools.LiteralSecret(k, s) {
					v[k] = tools.Mask
					continue
				}
				v[k] = walk(x)
			}
		case []any:
			for i, x := range v {
				v[i] = walk(x)
			}
		}
		return v
	}
	out, err := marshal(walk(doc))
	if err != nil {
		return nil
	}
	return out
}

// explainLookup says what a lookup will do (for docket tools check).
func explainLookup(l *toolsfile.Lookup, callOutput string) []string {
	at := "the answer"
	if l.Output != "" {
		at = l.Output
	}
	indexed := false
	if toks, err := toolsfile.SplitPointer(l.Output); err == nil && len(toks) > 0 {
		_, err := strconv.Atoi(toks[len(toks)-1])
		indexed = err == nil
	}
	recorded := "that value"
	if !indexed && l.Output == "" {
		recorded = "that value, of an array its first element"
	} else if !indexed {
		recorded = "that value, of an array its first element (so \"" + l.Output + "\" and \"" + l.Output + "/0\" behave alike)"
	}
	rec := "the whole call answer"
	if callOutput != "" {
		rec = "the call's " + callOutput
	}
	var out []string
	switch l.Found {
	case "status_200":
		out = append(out,
			"found: a 200 answer; records "+at+" of it (an array's first element; an empty array as it is)",
			"not found: a 404 answer",
			fmt.Sprintf("error (retried, then needs_review): any other status, or nothing at %s (an index past the end of an array included)", at))
	default: // nonempty
		out = append(out,
			fmt.Sprintf("found: a 2xx answer with a non-empty object or array at %s; records %s", at, recorded),
			fmt.Sprintf("not found: a 404 answer, or at %s null, an empty array or object (or an empty first element), or an index past the end of an array", at),
			fmt.Sprintf("error (retried, then needs_review): any other status, a non-JSON answer, or a missing member on the way to %s", at))
	}
	out = append(out,
		"what it records must have the shape of "+rec+": a found effect and a new one are recorded alike",
		"\"not found\" is trusted only once the earlier attempt is older than timeout + visibility_lag + the clock-skew margin")
	return out
}
