package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 canonical form of one JSON value: object
// keys sorted by UTF-16 code units, no insignificant whitespace, numbers in
// ECMAScript form (1, 1.0 and 1e0 all become 1), strings minimally escaped.
//
// Before canonicalizing it checks the input strictly: at most
// MaxDocumentSize bytes (ErrTooLarge), nesting at most MaxDepth (ErrTooDeep),
// well-formed JSON without duplicate keys, invalid UTF-8 or trailing data
// (ErrInvalidJSON), and no number whose magnitude exceeds 2^53
// (ErrNumberRange: send big ids as strings). Errors name the path of the
// offending value.
func Canonical(data []byte) ([]byte, error) {
	if err := checkJSON(data); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	out, err := jcs.Transform(data)
	if err != nil {
		// Unreachable for input checkJSON accepted; kept as a clear error.
		return nil, fmt.Errorf("canonical JSON: %w: %v", ErrInvalidJSON, err)
	}
	return out, nil
}

// checkJSON validates data as one JSON value within this package's limits,
// numbers included.
func checkJSON(data []byte) error {
	if len(data) > MaxDocumentSize {
		return fmt.Errorf("%w: %d bytes, the limit is %d bytes (16 MiB)", ErrTooLarge, len(data), MaxDocumentSize)
	}
	s := &scanner{data: data}
	s.onNumber = s.checkNumbers()
	return s.run()
}

// canonicalString is the RFC 8785 form of the JSON string s. s must be valid
// UTF-8: encoding/json would silently replace invalid bytes, and two
// different ids must never collide.
func canonicalString(what, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", what, err)
	}
	return jcs.Transform(b)
}

// Key derives the idempotency key of an action, as plan/README.md, Key derivation, defines it:
//
//	"dk1_" + lowercase_hex(sha256(JCS([runID, actionID, tool, resolvedArgs])))
//
// Callers pass the resolved arguments (after Resolve), exactly as validated
// and recorded: Key only hashes, it does not look for references. The
// arguments must pass Canonical's checks (a number beyond ±2^53 is refused),
// and runID, actionID and tool must be valid UTF-8. actionID is not held to
// the plan id alphabet: the executor derives compensation keys from
// "<id>.undo".
//
// "dk1_" is a version: the derivation must never change under it. A new
// derivation needs a new prefix ("dk2_").
func Key(runID, actionID, tool string, resolvedArgs json.RawMessage) (string, error) {
	args, err := Canonical(resolvedArgs)
	if err != nil {
		return "", fmt.Errorf("key for action %q: args: %w", actionID, err)
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for _, f := range []struct{ what, v string }{{"run id", runID}, {"action id", actionID}, {"tool", tool}} {
		b, err := canonicalString(f.what, f.v)
		if err != nil {
			return "", fmt.Errorf("key for action %q: %w", actionID, err)
		}
		buf.Write(b)
		buf.WriteByte(',')
	}
	buf.Write(args)
	buf.WriteByte(']')
	sum := sha256.Sum256(buf.Bytes())
	return "dk1_" + hex.EncodeToString(sum[:]), nil
}

// hashedPlan is the part of a plan that Hash covers.
type hashedPlan struct {
	Goal    string         `json:"goal"`
	Actions []hashedAction `json:"actions"`
}

type hashedAction struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args"`
	DependsOn []string        `json:"depends_on"`
	// Present only when set, so that the hash of a plan without timers
	// is what it always was.
	NotBefore string `json:"not_before,omitempty"`
	After     string `json:"after,omitempty"`
}

// Hash is a stable digest ("sha256:" + lowercase hex) of what the plan asks
// for: sha256 over the canonical JSON of
//
//	{"goal": ..., "actions": [{"id", "tool", "args" (canonical), "depends_on" (sorted),
//	  "not_before"?, "after"?}]}
//
// not_before and after are there only when set (so a plan without them
// hashes as it did before they existed), in a normal form when valid: the
// time in UTC (RFC 3339), the duration as FormatDuration writes it.
// with actions in plan order. Formatting, key order and number spelling in
// args do not change it; the order of depends_on does not either (it carries
// no meaning), and a missing depends_on hashes like an empty one. ID, RunID,
// Meta, CreatedAt, Transcript and Why are not part of it. Hash does not run
// Check; it fails only when args cannot be canonicalized or a string is not
// valid UTF-8.
func Hash(p *Plan) (string, error) {
	if p == nil {
		return "", fmt.Errorf("plan hash: nil plan")
	}
	h := hashedPlan{Goal: p.Goal, Actions: make([]hashedAction, len(p.Actions))}
	if !utf8.ValidString(p.Goal) {
		return "", fmt.Errorf("plan hash: goal is not valid UTF-8")
	}
	for i, a := range p.Actions {
		args, err := Canonical(a.Args)
		if err != nil {
			return "", fmt.Errorf("plan hash: action %q (actions[%d]): args: %w", a.ID, i, err)
		}
		deps := slices.Clone(a.DependsOn)
		if deps == nil {
			deps = []string{}
		}
		slices.Sort(deps)
		strs := append([]string{a.ID, a.Tool}, deps...)
		for _, s := range strs {
			if !utf8.ValidString(s) {
				return "", fmt.Errorf("plan hash: action %q (actions[%d]): %q is not valid UTF-8", a.ID, i, s)
			}
		}
		h.Actions[i] = hashedAction{ID: a.ID, Tool: a.Tool, Args: args, DependsOn: deps, NotBefore: a.NotBefore, After: a.After}
		if t, err := parseNotBefore(a.NotBefore); err == nil && a.NotBefore != "" {
			h.Actions[i].NotBefore = t.Format(time.RFC3339Nano)
		}
		if d, err := ParseDuration(a.After); err == nil && a.After != "" {
			h.Actions[i].After = FormatDuration(d)
		}
		for _, s := range []string{h.Actions[i].NotBefore, h.Actions[i].After} {
			if !utf8.ValidString(s) {
				return "", fmt.Errorf("plan hash: action %q (actions[%d]): %q is not valid UTF-8", a.ID, i, s)
			}
		}
	}
	doc, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("plan hash: %w", err)
	}
	canon, err := jcs.Transform(doc)
	if err != nil {
		return "", fmt.Errorf("plan hash: canonical JSON: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
