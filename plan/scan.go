package plan

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// segment is one step of a path inside a JSON value: an object key or an
// array index.
type segment struct {
	key     string
	index   int
	isIndex bool
}

// pathString renders segments as ".customer.id", "[2]" or `["a.b"]` (keys
// that are not plain words are quoted so that the path stays unambiguous).
func pathString(path []segment) string {
	var b strings.Builder
	for _, s := range path {
		switch {
		case s.isIndex:
			fmt.Fprintf(&b, "[%d]", s.index)
		case plainKey(s.key):
			b.WriteByte('.')
			b.WriteString(s.key)
		default:
			fmt.Fprintf(&b, "[%q]", s.key)
		}
	}
	return b.String()
}

// plainKey reports whether k renders unquoted in a path: [A-Za-z0-9_-$]+.
func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$') {
			return false
		}
	}
	return true
}

// scanner is a strict recursive-descent JSON reader. It validates one JSON
// value (RFC 8259 grammar, UTF-8, no duplicate keys, no lone surrogates,
// depth at most MaxDepth) without building a tree, and reports strings and
// numbers to optional callbacks together with their path and byte span.
// Recursion is bounded by MaxDepth, so hostile nesting cannot exhaust the stack.
type scanner struct {
	data  []byte
	pos   int
	depth int
	path  []segment

	// onString, when set, is called for every string value (not object
	// keys) with its decoded text and raw span data[start:end].
	onString func(text string, start, end int) error
	// onKey, when set, is called for every object key (s.path is the
	// path of the object).
	onKey func(key string) error
	// onNumber, when set, is called for every number with its text.
	onNumber func(text string, start int) error
}

// run validates s.data as exactly one JSON value, with optional callbacks.
func (s *scanner) run() error {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return s.fail(ErrInvalidJSON, "empty input: expected a JSON value")
	}
	if err := s.value(); err != nil {
		return err
	}
	s.skipSpace()
	if s.pos < len(s.data) {
		return s.fail(ErrInvalidJSON, "unexpected data after the JSON value")
	}
	return nil
}

// checkNumbers returns an onNumber callback refusing numbers beyond ±2^53.
func (s *scanner) checkNumbers() func(text string, start int) error {
	return func(text string, start int) error {
		if err := numberRangeError(text); err != "" {
			return s.failAt(start, ErrNumberRange, "%s", err)
		}
		return nil
	}
}

// fail reports a problem at the current position.
func (s *scanner) fail(kind error, format string, args ...any) error {
	return s.failAt(s.pos, kind, format, args...)
}

// failAt reports a problem at byte offset off.
func (s *scanner) failAt(off int, kind error, format string, args ...any) error {
	if off > len(s.data) {
		off = len(s.data)
	}
	line := 1 + bytes.Count(s.data[:off], []byte{'\n'})
	col := 1 + utf8.RuneCount(s.data[bytes.LastIndexByte(s.data[:off], '\n')+1:off])
	return &jsonError{
		kind:   kind,
		path:   pathString(s.path),
		offset: off,
		line:   line,
		column: col,
		msg:    fmt.Sprintf(format, args...),
	}
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// describe names the byte at the current position for error messages.
func (s *scanner) describe() string {
	if s.pos >= len(s.data) {
		return "end of input (truncated JSON?)"
	}
	c := s.data[s.pos]
	if c < utf8.RuneSelf {
		return fmt.Sprintf("character %q", rune(c))
	}
	r, size := utf8.DecodeRune(s.data[s.pos:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("invalid UTF-8 byte 0x%02x", c)
	}
	return fmt.Sprintf("character %q", r)
}

func (s *scanner) value() error {
	if s.pos >= len(s.data) {
		return s.fail(ErrInvalidJSON, "unexpected end of input (truncated JSON?): expected a value")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		start := s.pos
		text, err := s.str(s.onString != nil)
		if err != nil {
			return err
		}
		if s.onString != nil {
			return s.onString(text, start, s.pos)
		}
		return nil
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == 'N' || c == 'I':
		return s.fail(ErrInvalidJSON, "NaN and Infinity are not JSON numbers")
	default:
		return s.fail(ErrInvalidJSON, "unexpected %s: expected a value", s.describe())
	}
}

func (s *scanner) literal(word string) error {
	if !strings.HasPrefix(string(s.data[s.pos:min(len(s.data), s.pos+len(word))]), word) {
		return s.fail(ErrInvalidJSON, "invalid literal: expected %s", word)
	}
	s.pos += len(word)
	return nil
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(ErrTooDeep, "arrays and objects nest deeper than %d levels", MaxDepth)
	}
	return nil
}

func (s *scanner) object() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // '{'
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	var seen []string
	var seenSet map[string]struct{}
	for {
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return s.fail(ErrInvalidJSON, "unexpected %s: expected a string key", s.describe())
		}
		keyStart := s.pos
		key, err := s.str(true)
		if err != nil {
			return err
		}
		dup := false
		if seenSet != nil {
			_, dup = seenSet[key]
			seenSet[key] = struct{}{}
		} else {
			for _, k := range seen {
				if k == key {
					dup = true
					break
				}
			}
			seen = append(seen, key)
			if len(seen) > 16 {
				seenSet = make(map[string]struct{}, 32)
				for _, k := range seen {
					seenSet[k] = struct{}{}
				}
			}
		}
		if dup {
			return s.failAt(keyStart, ErrInvalidJSON, "duplicate key %q", key)
		}
		if s.onKey != nil {
			if err := s.onKey(key); err != nil {
				return err
			}
		}
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return s.fail(ErrInvalidJSON, "unexpected %s: expected ':' after key %q", s.describe(), key)
		}
		s.pos++
		s.skipSpace()
		s.path = append(s.path, segment{key: key})
		if err := s.value(); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		s.skipSpace()
		if s.pos < len(s.data) && s.data[s.pos] == ',' {
			s.pos++
			continue
		}
		if s.pos < len(s.data) && s.data[s.pos] == '}' {
			s.pos++
			s.depth--
			return nil
		}
		return s.fail(ErrInvalidJSON, "unexpected %s: expected ',' or '}' in object", s.describe())
	}
}

func (s *scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // '['
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for i := 0; ; i++ {
		s.skipSpace()
		s.path = append(s.path, segment{index: i, isIndex: true})
		if err := s.value(); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		s.skipSpace()
		if s.pos < len(s.data) && s.data[s.pos] == ',' {
			s.pos++
			continue
		}
		if s.pos < len(s.data) && s.data[s.pos] == ']' {
			s.pos++
			s.depth--
			return nil
		}
		return s.fail(ErrInvalidJSON, "unexpected %s: expected ',' or ']' in array", s.describe())
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads an RFC 8259 number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	start := s.pos
	d := s.data
	if d[s.pos] == '-' {
		s.pos++
		if s.pos < len(d) && d[s.pos] == 'I' {
			return s.failAt(start, ErrInvalidJSON, "NaN and Infinity are not JSON numbers")
		}
	}
	switch {
	case s.pos < len(d) && d[s.pos] == '0':
		s.pos++
		if s.pos < len(d) && isDigit(d[s.pos]) {
			return s.failAt(start, ErrInvalidJSON, "invalid number: leading zeros are not allowed")
		}
	case s.pos < len(d) && isDigit(d[s.pos]):
		for s.pos < len(d) && isDigit(d[s.pos]) {
			s.pos++
		}
	default:
		return s.fail(ErrInvalidJSON, "invalid number: unexpected %s after '-'", s.describe())
	}
	if s.pos < len(d) && d[s.pos] == '.' {
		s.pos++
		if s.pos >= len(d) || !isDigit(d[s.pos]) {
			return s.fail(ErrInvalidJSON, "invalid number: expected a digit after '.'")
		}
		for s.pos < len(d) && isDigit(d[s.pos]) {
			s.pos++
		}
	}
	if s.pos < len(d) && (d[s.pos] == 'e' || d[s.pos] == 'E') {
		s.pos++
		if s.pos < len(d) && (d[s.pos] == '+' || d[s.pos] == '-') {
			s.pos++
		}
		if s.pos >= len(d) || !isDigit(d[s.pos]) {
			return s.fail(ErrInvalidJSON, "invalid number: expected a digit in the exponent")
		}
		for s.pos < len(d) && isDigit(d[s.pos]) {
			s.pos++
		}
	}
	if s.onNumber != nil {
		return s.onNumber(string(d[start:s.pos]), start)
	}
	return nil
}

// str reads a JSON string at s.pos (which holds '"'). It validates escapes,
// UTF-8 and surrogate pairs; when decode is true it returns the text.
func (s *scanner) str(decode bool) (string, error) {
	d := s.data
	s.pos++ // opening quote
	start := s.pos
	var buf []byte // nil until the first escape, when decoding
	for {
		if s.pos >= len(d) {
			return "", s.fail(ErrInvalidJSON, "unexpected end of input (truncated JSON?): unterminated string")
		}
		c := d[s.pos]
		switch {
		case c == '"':
			var text string
			if decode {
				if buf == nil {
					text = string(d[start:s.pos])
				} else {
					text = string(buf)
				}
			}
			s.pos++
			return text, nil
		case c < 0x20:
			return "", s.fail(ErrInvalidJSON, "control character %q in string: must be escaped", rune(c))
		case c == '\\':
			if decode && buf == nil {
				buf = append([]byte(nil), d[start:s.pos]...)
			}
			r, err := s.escape()
			if err != nil {
				return "", err
			}
			if decode {
				buf = utf8.AppendRune(buf, r)
			}
		case c < utf8.RuneSelf:
			if buf != nil {
				buf = append(buf, c)
			}
			s.pos++
		default:
			r, size := utf8.DecodeRune(d[s.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", s.fail(ErrInvalidJSON, "invalid UTF-8 byte 0x%02x in string", c)
			}
			if buf != nil {
				buf = append(buf, d[s.pos:s.pos+size]...)
			}
			s.pos += size
		}
	}
}

// escape reads one escape sequence at s.pos ('\\') and returns its rune.
func (s *scanner) escape() (rune, error) {
	d := s.data
	at := s.pos
	if s.pos+1 >= len(d) {
		return 0, s.fail(ErrInvalidJSON, "unexpected end of input (truncated JSON?): unterminated escape")
	}
	c := d[s.pos+1]
	s.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := s.hex4(at)
		if err != nil {
			return 0, err
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r >= 0xDC00 {
			return 0, s.failAt(at, ErrInvalidJSON, "lone low surrogate \\u%04x in string", r)
		}
		if s.pos+1 >= len(d) || d[s.pos] != '\\' || d[s.pos+1] != 'u' {
			return 0, s.failAt(at, ErrInvalidJSON, "high surrogate \\u%04x not followed by a low surrogate", r)
		}
		lowAt := s.pos
		s.pos += 2
		r2, err := s.hex4(lowAt)
		if err != nil {
			return 0, err
		}
		if r2 < 0xDC00 || r2 > 0xDFFF {
			return 0, s.failAt(at, ErrInvalidJSON, "high surrogate \\u%04x not followed by a low surrogate", r)
		}
		return utf16.DecodeRune(r, r2), nil
	default:
		return 0, s.failAt(at, ErrInvalidJSON, "invalid escape %q in string", "\\"+string(rune(c)))
	}
}

func (s *scanner) hex4(at int) (rune, error) {
	if s.pos+4 > len(s.data) {
		return 0, s.failAt(at, ErrInvalidJSON, "unexpected end of input (truncated JSON?): incomplete \\u escape")
	}
	v, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, s.failAt(at, ErrInvalidJSON, "invalid \\u escape: %q is not 4 hex digits", s.data[s.pos:s.pos+4])
	}
	s.pos += 4
	return rune(v), nil
}

// numberRangeError returns a message when the JSON number text (grammar
// already checked) has a magnitude above 2^53, else "".
//
// The text is inspected as digits and an exponent, never converted through
// float64, so "1e400", "9007199254740993" and "9007199254740992.5" are all
// recognised exactly.
func numberRangeError(text string) string {
	if numberInRange(text) {
		return ""
	}
	shown := text
	if len(shown) > 40 {
		shown = shown[:37] + "..."
	}
	return fmt.Sprintf("number %s is beyond ±2^53 (9007199254740992): canonical JSON cannot keep it exact; send big ids and amounts as strings", shown)
}

func numberInRange(text string) bool {
	t := strings.TrimPrefix(text, "-")
	mant, exp := t, ""
	if i := strings.IndexAny(t, "eE"); i >= 0 {
		mant, exp = t[:i], t[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	e := parseExponent(exp) - len(frac)
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return true // zero
	}
	n0 := len(digits)
	digits = strings.TrimRight(digits, "0")
	e += n0 - len(digits)
	// The value is digits × 10^e, with no leading or trailing zeros in
	// digits, so it lies in [10^(n-1+e), 10^(n+e)) where n = len(digits):
	// intDigits is the number of digits before the decimal point.
	intDigits := len(digits) + e
	switch {
	case intDigits <= 15: // below 10^15 < 2^53
		return true
	case intDigits >= 17: // at least 10^16 > 2^53
		return false
	}
	// Sixteen digits before the point: compare them with 2^53.
	ip := digits
	if len(ip) > 16 {
		ip = ip[:16]
	}
	ip += strings.Repeat("0", 16-len(ip))
	v, err := strconv.ParseUint(ip, 10, 64)
	if err != nil {
		return false
	}
	hasFraction := len(digits) > 16
	return v < maxSafeInteger || v == maxSafeInteger && !hasFraction
}

// parseExponent parses an exponent ("", "+12", "-7"), saturating at ±10^9 so
// that absurd exponents cannot overflow.
func parseExponent(exp string) int {
	if exp == "" {
		return 0
	}
	neg := exp[0] == '-'
	exp = strings.TrimLeft(exp, "+-")
	exp = strings.TrimLeft(exp, "0")
	v := 0
	if len(exp) > 9 {
		v = 1_000_000_000
	} else if exp != "" {
		v, _ = strconv.Atoi(exp)
	}
	if neg {
		return -v
	}
	return v
}
