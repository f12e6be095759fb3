package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// The tokens file (docket serve --tokens FILE) names the service's tokens
// and their scopes, never a token in clear:
//
//	{"version": 1, "tokens": [
//	  {"name": "agent", "scopes": ["read", "submit"], "sha256": "<hex of sha256(token)>"},
//	  {"name": "alice", "scopes": ["read", "review", "control"], "env": "DOCKET_TOKEN_ALICE",
//	   "groups": ["finance"]}
//	]}
//
// sha256 is the lowercase hex SHA-256 of the token (printf %s "$T" |
// sha256sum); env names the environment variable holding it. groups
// (optional) are the groups the token belongs to: a policy rule or budget
// with approver_groups lets their members approve.

// tokenNameRE is what a token's name may be (the name is recorded with every
// decision as "token:NAME").
var tokenNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// TokenFileError is an error in a tokens file, at a line and column.
type TokenFileError struct {
	Line, Col int
	Msg       string
}

func (e *TokenFileError) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

// tokenFileEntry is one token as the file writes it.
type tokenFileEntry struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	SHA256 string   `json:"sha256"`
	Env    string   `json:"env"`
	Groups []string `json:"groups"`
}

// ParseTokensFile reads a tokens file; getenv reads the variables entries
// name with "env". Errors are *TokenFileError (line and column of the
// offending entry or syntax).
func ParseTokensFile(data []byte, getenv func(string) string) ([]Token, error) {
	at := func(off int64, format string, args ...any) error {
		line, col := lineCol(data, off)
		return &TokenFileError{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
	}
	jsonErr := func(dec *json.Decoder, err error) error {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			// A decoder's offsets are relative to its buffer: read the
			// whole file once more for the position of the first error.
			var v any
			if errors.As(json.Unmarshal(data, &v), &se) {
				return at(se.Offset-1, "%v", se)
			}
			return at(dec.InputOffset(), "%v", err)
		case errors.As(err, &te):
			return at(te.Offset, "%s: %v", te.Field, err)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return at(int64(len(data)), "the file ends early: want {\"version\": 1, \"tokens\": [...]}")
		}
		return at(dec.InputOffset(), "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil {
		return nil, jsonErr(dec, err)
	} else if t != json.Delim('{') {
		return nil, at(0, "want a JSON object {\"version\": 1, \"tokens\": [...]}")
	}
	var (
		version   *int
		toks      []Token
		hasTokens bool
		seen      = map[string]bool{}
		tokensAt  int64
	)
	for dec.More() {
		keyAt := skipSpace(data, dec.InputOffset())
		t, err := dec.Token()
		if err != nil {
			return nil, jsonErr(dec, err)
		}
		key, _ := t.(string)
		switch key {
		case "version":
			var v int
			if err := dec.Decode(&v); err != nil {
				return nil, jsonErr(dec, err)
			}
			if v != 1 {
				return nil, at(keyAt, "version %d: this docket reads version 1", v)
			}
			version = &v
		case "tokens":
			tokensAt = keyAt
			hasTokens = true
			if t, err := dec.Token(); err != nil {
				return nil, jsonErr(dec, err)
			} else if t != json.Delim('[') {
				return nil, at(keyAt, "tokens must be a list")
			}
			for i := 0; dec.More(); i++ {
				entryAt := skipSpace(data, dec.InputOffset())
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return nil, jsonErr(dec, err)
				}
				tok, err := parseTokenEntry(raw, seen, getenv)
				if err != nil {
					return nil, at(entryAt, "tokens[%d]: %v", i, err)
				}
				toks = append(toks, tok)
			}
			if _, err := dec.Token(); err != nil {
				return nil, jsonErr(dec, err)
			}
		default:
			return nil, at(keyAt, "unknown field %q (a tokens file has version and tokens)", key)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr(dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, at(dec.InputOffset(), "trailing data after the JSON object")
	}
	switch {
	case version == nil:
		return nil, at(0, "version is missing: want \"version\": 1")
	case !hasTokens || len(toks) == 0:
		return nil, at(tokensAt, "no tokens: list at least one")
	}
	return toks, nil
}

// parseTokenEntry checks one entry of the file.
func parseTokenEntry(raw []byte, seen map[string]bool, getenv func(string) string) (Token, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Token{}, errors.New("an entry is an object {\"name\", \"scopes\", \"sha256\" | \"env\", \"groups\"?}")
	}
	for _, clear := range []string{"token", "secret", "value"} {
		if _, ok := fields[clear]; ok {
			return Token{}, fmt.Errorf("%s: a token is never kept in clear in the file: give its sha256 (printf %%s \"$T\" | sha256sum) or env (the variable holding it)", clear)
		}
	}
	var e tokenFileEntry
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Token{}, err
	}
	if !tokenNameRE.MatchString(e.Name) {
		return Token{}, fmt.Errorf("name %q: a letter, then up to 63 letters, digits, _ . -", e.Name)
	}
	if seen[e.Name] {
		return Token{}, fmt.Errorf("name %q: two tokens have this name", e.Name)
	}
	seen[e.Name] = true
	if len(e.Scopes) == 0 {
		return Token{}, fmt.Errorf("%s: scopes is empty: give at least one of read, submit, review, control, admin", e.Name)
	}
	if err := checkGroups(e.Groups); err != nil {
		return Token{}, fmt.Errorf("%s: groups: %w", e.Name, err)
	}
	t := Token{Name: e.Name, Groups: e.Groups}
	for _, s := range e.Scopes {
		sc, err := ParseScope(s)
		if err != nil {
			return Token{}, fmt.Errorf("%s: %w", e.Name, err)
		}
		if slices.Contains(t.Scopes, sc) {
			return Token{}, fmt.Errorf("%s: scope %s is listed twice", e.Name, sc)
		}
		t.Scopes = append(t.Scopes, sc)
	}
	switch {
	case (e.SHA256 == "") == (e.Env == ""):
		return Token{}, fmt.Errorf("%s: give exactly one of sha256 (the token's SHA-256, lowercase hex) and env (the variable holding the token)", e.Name)
	case e.SHA256 != "":
		if !isSHA256Hex(e.SHA256) {
			return Token{}, fmt.Errorf("%s: sha256 must be 64 lowercase hex digits (printf %%s \"$T\" | sha256sum)", e.Name)
		}
		t.SHA256 = e.SHA256
	default:
		v := strings.TrimSpace(getenv(e.Env))
		if v == "" {
			return Token{}, fmt.Errorf("%s: the variable %s is not set", e.Name, e.Env)
		}
		if len(v) < MinTokenLength {
			return Token{}, fmt.Errorf("%s: the token in %s must be at least %d characters (it has %d)", e.Name, e.Env, MinTokenLength, len(v))
		}
		t.Secret = v
	}
	return t, nil
}

// skipSpace moves off past JSON whitespace and one separator (a decoder's
// offset sits before the comma or colon that follows the previous value).
func skipSpace(data []byte, off int64) int64 {
	for off < int64(len(data)) {
		switch data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
		default:
			return off
		}
	}
	return off
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(data []byte, off int64) (int, int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}
