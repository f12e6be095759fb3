package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Ref is one reference "${ACTION.output[.PATH]}".
type Ref struct {
	Action string   // referenced action id
	Path   []string // keys and array indexes after "output"
	Text   string   // the reference as written
}

// String returns the reference as written.
func (r Ref) String() string { return r.Text }

// ParseRef parses s as a reference. ok is false when s contains no "${"; err is
// non-nil when s contains "${" but is not exactly one valid reference.
//
// A reference is exactly "${ACTION.output}" or "${ACTION.output.PATH}":
// ACTION is an action id ([A-Za-z0-9_-]+), PATH is one or more non-empty
// segments separated by '.', none containing '.', '{' or '}'. Errors wrap
// ErrReference.
func ParseRef(s string) (ref Ref, ok bool, err error) {
	parts, ok, err := splitRef(s, "${a1.output.id}")
	if !ok || err != nil {
		return Ref{}, ok, err
	}
	if len(parts) < 2 || parts[1] != "output" {
		return Ref{}, true, fmt.Errorf("%w: %s must have the form ${ACTION.output} or ${ACTION.output.PATH}", ErrReference, quoteShort(s))
	}
	if msg := idProblem(parts[0]); msg != "" {
		return Ref{}, true, fmt.Errorf("%w: %s: action %s", ErrReference, quoteShort(s), msg)
	}
	for _, seg := range parts[2:] {
		if seg == "" {
			return Ref{}, true, fmt.Errorf("%w: %s has an empty path segment", ErrReference, quoteShort(s))
		}
	}
	return Ref{Action: parts[0], Path: parts[2:], Text: s}, true, nil
}

// SplitRef splits a string that is exactly one "${...}" into its
// dot-separated segments: "${input.to.iban}" gives ["input", "to", "iban"].
// It is the envelope of every reference docket knows (a plan's
// "${ACTION.output.PATH}", a compensation's "${input.PATH}"): ok is false
// when s contains no "${"; err (wrapping ErrReference) is non-nil when s
// contains "${" but is not exactly one reference (docket never interpolates
// text into strings) or has braces inside. Segments are not checked further:
// each kind of reference checks its own.
func SplitRef(s string) (segs []string, ok bool, err error) { return splitRef(s, "") }

// splitRef is SplitRef; example, if set, is a whole-value reference that the
// error for interpolated text suggests.
func splitRef(s, example string) ([]string, bool, error) {
	if !strings.Contains(s, "${") {
		return nil, false, nil
	}
	if !strings.HasPrefix(s, "${") || !strings.HasSuffix(s, "}") || strings.Count(s, "${") != 1 {
		hint := ""
		if example != "" {
			hint = "; make the whole value a reference such as " + example
		}
		return nil, true, fmt.Errorf("%w: %s contains \"${\" but is not exactly one reference: docket does not interpolate text into strings%s", ErrReference, quoteShort(s), hint)
	}
	inner := s[2 : len(s)-1]
	if strings.ContainsAny(inner, "{}") {
		return nil, true, fmt.Errorf("%w: %s: braces are not allowed inside a reference", ErrReference, quoteShort(s))
	}
	return strings.Split(inner, "."), true, nil
}

// quoteShort quotes s for an error message, shortened when long.
func quoteShort(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:77]) + "..."
	}
	return strconv.Quote(s)
}

// foundRef is a reference found in an args document with its location.
type foundRef struct {
	ref        Ref
	path       string // path inside args (".customer.id", "[2]")
	start, end int    // raw span of the string in args
}

// scanRefs validates args as a JSON object within limits and finds every
// reference in it. Problems that do not stop the scan (malformed references,
// keys containing "${", numbers beyond ±2^53) are passed to report with the
// path of the value; a report of nil means the first such problem is
// returned as the error. The returned error is the scan's own (syntax,
// depth, size) or the first reported problem.
func scanRefs(args []byte, report func(path string, err error)) ([]foundRef, error) {
	if len(args) > MaxDocumentSize {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d bytes (16 MiB)", ErrTooLarge, len(args), MaxDocumentSize)
	}
	if k := kindOf(args); k != "object" {
		return nil, fmt.Errorf("must be a JSON object, got %s", k)
	}
	var refs []foundRef
	var first error
	s := &scanner{data: args}
	note := func(err error) error {
		path := pathString(s.path)
		if report != nil {
			report(path, err)
			return nil
		}
		if first == nil {
			first = fmt.Errorf("at %q: %w", strings.TrimPrefix(path, "."), err)
		}
		return nil
	}
	s.onString = func(text string, start, end int) error {
		ref, ok, err := ParseRef(text)
		switch {
		case err != nil:
			return note(err)
		case ok:
			refs = append(refs, foundRef{ref: ref, path: pathString(s.path), start: start, end: end})
		}
		return nil
	}
	s.onKey = func(key string) error {
		if strings.Contains(key, "${") {
			s.path = append(s.path, segment{key: key})
			defer func() { s.path = s.path[:len(s.path)-1] }()
			return note(fmt.Errorf("%w: object key %s contains \"${\": keys are never resolved", ErrReference, quoteShort(key)))
		}
		return nil
	}
	s.onNumber = func(text string, start int) error {
		if msg := numberRangeError(text); msg != "" {
			return note(fmt.Errorf("%w: %s", ErrNumberRange, msg))
		}
		return nil
	}
	if err := s.run(); err != nil {
		return nil, err
	}
	if first != nil {
		return nil, first
	}
	return refs, nil
}

// Refs lists every reference inside args (a JSON object), in document order.
// It fails on invalid JSON, on a string that contains "${" without being
// exactly one reference, on an object key containing "${", and on a number
// beyond ±2^53, naming the path.
func Refs(args json.RawMessage) ([]Ref, error) {
	found, err := scanRefs(args, nil)
	if err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	refs := make([]Ref, len(found))
	for i, f := range found {
		refs[i] = f.ref
	}
	return refs, nil
}

// Resolve replaces every reference in args by the JSON value it points to in
// outputs (action id -> recorded output), type preserved: the string
// "${a1.output.total}" becomes the number 12.5 if that is what a1 returned.
// Everything else in args is kept byte for byte. Errors wrap ErrReference and
// name the reference, where it is in args and what was missing (no output
// recorded for the action, a missing key, an index past the end, a path that
// goes through a string). The result is checked like Canonical's input, so a
// resolved value beyond ±2^53 or nesting beyond MaxDepth is refused here.
func Resolve(args json.RawMessage, outputs map[string]json.RawMessage) (json.RawMessage, error) {
	found, err := scanRefs(args, nil)
	if err != nil {
		return nil, fmt.Errorf("resolve args: %w", err)
	}
	if len(found) == 0 {
		return append(json.RawMessage(nil), args...), nil
	}
	var out bytes.Buffer
	last := 0
	for _, f := range found {
		v, err := lookup(f.ref, outputs)
		if err != nil {
			return nil, fmt.Errorf("resolve args at %q: %w", strings.TrimPrefix(f.path, "."), err)
		}
		out.Write(args[last:f.start])
		out.Write(v)
		last = f.end
	}
	out.Write(args[last:])
	res := out.Bytes()
	if err := checkJSON(res); err != nil {
		return nil, fmt.Errorf("resolved args: %w", err)
	}
	return res, nil
}

// lookup finds the value a reference points to, as raw JSON without
// surrounding whitespace.
func lookup(r Ref, outputs map[string]json.RawMessage) ([]byte, error) {
	cur, ok := outputs[r.Action]
	if !ok {
		return nil, fmt.Errorf("%w: %s: no output recorded for action %s", ErrReference, r.Text, r.Action)
	}
	cur = bytes.TrimSpace(cur)
	if !json.Valid(cur) {
		return nil, fmt.Errorf("%w: %s: the recorded output of %s is not valid JSON", ErrReference, r.Text, r.Action)
	}
	where := "" // path walked so far, for messages
	at := func() string {
		if where == "" {
			return r.Action + "'s output"
		}
		return fmt.Sprintf("%s's output at %q", r.Action, where)
	}
	for _, seg := range r.Path {
		switch kind := kindOf(cur); kind {
		case "object":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(cur, &m); err != nil {
				return nil, fmt.Errorf("%w: %s: reading %s: %v", ErrReference, r.Text, at(), err)
			}
			next, ok := m[seg]
			if !ok {
				return nil, fmt.Errorf("%w: %s: %s has no key %q", ErrReference, r.Text, at(), seg)
			}
			cur = bytes.TrimSpace(next)
		case "array":
			var a []json.RawMessage
			if err := json.Unmarshal(cur, &a); err != nil {
				return nil, fmt.Errorf("%w: %s: reading %s: %v", ErrReference, r.Text, at(), err)
			}
			i, ok := arrayIndex(seg)
			if !ok {
				return nil, fmt.Errorf("%w: %s: %s is an array, and %q is not an index (a decimal number without leading zeros)", ErrReference, r.Text, at(), seg)
			}
			if i >= len(a) {
				items := "items"
				if len(a) == 1 {
					items = "item"
				}
				return nil, fmt.Errorf("%w: %s: %s has only %d %s", ErrReference, r.Text, at(), len(a), items)
			}
			cur = bytes.TrimSpace(a[i])
		default:
			return nil, fmt.Errorf("%w: %s: %s is %s, which has no %q inside", ErrReference, r.Text, at(), withArticle(kind), seg)
		}
		if where != "" {
			where += "."
		}
		where += seg
	}
	return cur, nil
}

// arrayIndex parses a path segment as an array index.
func arrayIndex(seg string) (int, bool) {
	if seg == "" || len(seg) > 9 || seg[0] == '0' && len(seg) > 1 {
		return 0, false
	}
	for i := 0; i < len(seg); i++ {
		if !isDigit(seg[i]) {
			return 0, false
		}
	}
	i, err := strconv.Atoi(seg)
	return i, err == nil
}

// kindOf names the JSON type of raw by its first significant byte.
func kindOf(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch c := raw[0]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	case c == '-' || isDigit(c):
		return "number"
	default:
		return "invalid JSON"
	}
}

func withArticle(kind string) string {
	switch kind {
	case "object", "array":
		return "an " + kind
	case "null":
		return "null"
	default:
		return "a " + kind
	}
}
