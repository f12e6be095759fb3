package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// MaxWireName is the longest tool name the chat-completions API accepts as a
// function name ([a-zA-Z0-9_-]{1,64}); MCP clients forward tools to those
// APIs too.
const MaxWireName = 64

// WireNames gives every registry name the name a model (the planner) or an
// MCP client (docket mcp) sees: a name in [a-zA-Z0-9_-]{1,64} is kept
// ("charge"); others have every other character replaced by '_'
// ("memory.create_entities" → "memory_create_entities"); a name that then
// collides, is empty or had to be cut gets "_" and 8 hex digits of its
// sha256 (more on a collision of those). The result depends only on the set
// of names, so every process maps alike. Keys are always derived from the
// registry name, never from this one.
func WireNames(names []string) map[string]string {
	names = slices.Clone(names)
	sort.Strings(names)
	toWire := make(map[string]string, len(names))
	taken := make(map[string]bool, len(names))
	var changed []string
	for _, n := range names {
		if ValidWireName(n) {
			toWire[n], taken[n] = n, true
		} else {
			changed = append(changed, n)
		}
	}
	for _, n := range changed {
		w := sanitizeWireName(n)
		if len(w) > MaxWireName || taken[w] || w == "" {
			sum := sha256.Sum256([]byte(n))
			suffix := "_" + hex.EncodeToString(sum[:4])
			w = w[:min(len(w), MaxWireName-len(suffix))] + suffix
			for i := 4; taken[w]; i++ { // a collision of hash prefixes: lengthen
				suffix = "_" + hex.EncodeToString(sum[:i+1])
				w = w[:min(len(w), MaxWireName-len(suffix))] + suffix
			}
		}
		toWire[n], taken[w] = w, true
	}
	return toWire
}

// ValidWireName reports whether s is a name models and MCP clients accept
// as it is.
func ValidWireName(s string) bool {
	if s == "" || len(s) > MaxWireName {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !wireByte(s[i]) {
			return false
		}
	}
	return true
}

func wireByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// sanitizeWireName replaces every character outside [a-zA-Z0-9_-] (a whole
// UTF-8 sequence counts as one) by '_'.
func sanitizeWireName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if wireByte(s[i]) {
			b.WriteByte(s[i])
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteByte('_')
		i += size
	}
	return b.String()
}
