package postgres

import (
	"net/url"
	"strings"
)

// A ledger's connection string is a URL (postgres://… or postgresql://…)
// or libpq's keyword/value form, as psql and every libpq program take it:
//
//	host=db.internal port=5432 dbname=docket user=docket sslmode=verify-full
//
// Keywords are lowercase words, each followed by = and a value; spaces
// around = are allowed; a value with spaces or quotes is written in single
// quotes, with \' and \\ inside them. pgx parses both forms the way libpq
// does (and reads PGHOST, PGPASSWORD, ~/.pgpass and the rest for what the
// string leaves out).

// anchorKeywords are the keywords that make a keyword/value string name a
// database: at least one of them must be present, so a word with an = in
// it is not taken for a connection string.
var anchorKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "service": true,
}

// keyValue is one keyword and its value.
type keyValue struct{ key, value string }

// parseKeywordValue parses libpq's keyword/value form. ok is false when s
// is not one: empty, a keyword that is not a lowercase word, a keyword
// without =, or an unterminated quote.
func parseKeywordValue(s string) (kvs []keyValue, ok bool) {
	c := kvScanner{s: s}
	for {
		c.spaces()
		if c.done() {
			return kvs, len(kvs) > 0
		}
		key := c.word()
		if !isKeyword(key) {
			return nil, false
		}
		c.spaces()
		if c.done() || c.s[c.i] != '=' {
			return nil, false
		}
		c.i++
		c.spaces()
		v, ok := c.value()
		if !ok {
			return nil, false
		}
		kvs = append(kvs, keyValue{key, v})
	}
}

// kvScanner reads a keyword/value string from s[i:].
type kvScanner struct {
	s string
	i int
}

func (c *kvScanner) done() bool { return c.i == len(c.s) }

func (c *kvScanner) spaces() {
	for !c.done() && isSpace(c.s[c.i]) {
		c.i++
	}
}

// word reads up to an = or a space.
func (c *kvScanner) word() string {
	start := c.i
	for !c.done() && c.s[c.i] != '=' && !isSpace(c.s[c.i]) {
		c.i++
	}
	return c.s[start:c.i]
}

// value reads a value: in single quotes (false: unterminated) or up to a
// space, a backslash escaping the next byte in either.
func (c *kvScanner) value() (string, bool) {
	quoted := !c.done() && c.s[c.i] == '\''
	if quoted {
		c.i++
	}
	var v strings.Builder
	for {
		if c.done() {
			return v.String(), !quoted // unterminated quote
		}
		b := c.s[c.i]
		if quoted && b == '\'' {
			c.i++
			return v.String(), true
		}
		if !quoted && isSpace(b) {
			return v.String(), true
		}
		c.i++
		if b == '\\' && !c.done() {
			b = c.s[c.i]
			c.i++
		}
		v.WriteByte(b)
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isKeyword(k string) bool {
	if k == "" || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isKeywordValue reports whether s is a keyword/value connection string
// naming a database (one of host, hostaddr, port, dbname, user, service).
func isKeywordValue(s string) bool {
	kvs, ok := parseKeywordValue(s)
	if !ok {
		return false
	}
	for _, kv := range kvs {
		if anchorKeywords[kv.key] {
			return true
		}
	}
	return false
}

// hasParam reports whether connection string s (a URL or the keyword/value
// form) sets parameter name: a URL's query parameter or a keyword.
func hasParam(s, name string) bool {
	if kvs, ok := parseKeywordValue(s); ok { // a URL is never one
		for _, kv := range kvs {
			if kv.key == name {
				return true
			}
		}
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Query().Has(name)
}

// quoteValue writes a value as libpq reads it back.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\f\v'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// redactKeywordValue rewrites a keyword/value string with its password
// replaced by xxxxx (ok false: s is not one).
func redactKeywordValue(s string) (string, bool) {
	kvs, ok := parseKeywordValue(s)
	if !ok {
		return "", false
	}
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		v := kv.value
		if kv.key == "password" || kv.key == "sslpassword" {
			v = "xxxxx"
		}
		parts[i] = kv.key + "=" + quoteValue(v)
	}
	return strings.Join(parts, " "), true
}
