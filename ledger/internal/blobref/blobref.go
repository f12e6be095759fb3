// Package blobref is the in-record reference to a large value stored once
// per run as a content blob (see ledger/badgerdb's large.go for why): the
// reference format, blob names, and a resolver that replaces references by
// their bytes. The ledger's rules write references; every backend resolves
// them when values leave it.
//
// Imports: the standard library only.
package blobref

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Large is the size from which a value is stored as a blob.
const Large = 64 << 10

// Prefix starts an in-record reference to a content blob. No JSON text
// starts with a NUL byte, so a reference is never mistaken for a value.
const Prefix = "\x00dkblob:"

// Len is the length of a reference: the prefix and 64 hex digits.
const Len = len(Prefix) + 2*sha256.Size

// HashOf is the blob name of a value: lowercase hex sha256.
func HashOf(v []byte) string {
	h := sha256.Sum256(v)
	return hex.EncodeToString(h[:])
}

// ValidHash reports whether h is a blob name.
func ValidHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Of is the reference to the blob named hash.
func Of(hash string) json.RawMessage { return json.RawMessage(Prefix + hash) }

// Hash returns the blob name if v is a reference.
func Hash(v []byte) (string, bool) {
	if len(v) != Len || string(v[:len(Prefix)]) != Prefix {
		return "", false
	}
	return string(v[len(Prefix):]), true
}

// Is reports whether v is a reference.
func Is(v []byte) bool { _, ok := Hash(v); return ok }

// Resolver replaces references by their bytes, reading each blob once.
type Resolver struct {
	Get  func(hash string) (json.RawMessage, error)
	seen map[string]json.RawMessage
}

// Know records a blob's bytes so that resolving it needs no read.
func (r *Resolver) Know(hash string, raw json.RawMessage) {
	if r.seen == nil {
		r.seen = map[string]json.RawMessage{}
	}
	r.seen[hash] = raw
}

// Value returns v, or the bytes it refers to.
func (r *Resolver) Value(v json.RawMessage) (json.RawMessage, error) {
	hash, ok := Hash(v)
	if !ok {
		return v, nil
	}
	if raw, ok := r.seen[hash]; ok {
		return raw, nil
	}
	raw, err := r.Get(hash)
	if err != nil {
		return nil, err
	}
	r.Know(hash, raw)
	return raw, nil
}
