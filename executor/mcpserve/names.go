package mcpserve

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
)

// maxWireName is the longest tool name the model APIs that agents forward
// MCP tools to accept (OpenAI's function names: [a-zA-Z0-9_-]{1,64}).
const maxWireName = 64

// wireNames gives every registry name the name MCP clients see, by the rule
// the planner uses for the model (planner.mapNames): a name in
// [a-zA-Z0-9_-]{1,64} is kept ("charge"); others have every other character
// replaced by '_' ("memory.create_entities" → "memory_create_entities"); a
// name that then collides, or had to be cut, gets "_" and 8 hex digits of its
// sha256. The result depends only on the set of names. Keys are always
// derived from the registry name, never from this one.
func wireNames(names []string) map[string]string {
	names = slices.Clone(names)
	sort.Strings(names)
	toWire := make(map[string]string, len(names))
	taken := make(map[string]bool, len(names))
	var changed []string
	for _, n := range names {
		if validWireName(n) {
			toWire[n], taken[n] = n, true
		} else {
			changed = append(changed, n)
		}
	}
	for _, n := range changed {
		w := sanitizeName(n)
		if len(w) > maxWireName || taken[w] || w == "" {
			sum := sha256.Sum256([]byte(n))
			for i := 4; ; i++ {
				suffix := "_" + hex.EncodeToString(sum[:i])
				w = sanitizeName(n)
				w = w[:min(len(w), maxWireName-len(suffix))] + suffix
				if !taken[w] {
					break
				}
			}
		}
		toWire[n], taken[w] = w, true
	}
	return toWire
}

func validWireName(s string) bool {
	if s == "" || len(s) > maxWireName {
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

func sanitizeName(s string) string {
	b := []byte(s)
	for i := range b {
		if !wireByte(b[i]) {
			b[i] = '_'
		}
	}
	return string(b)
}
