// Package masterkey reads, makes and names the master key that encrypts a
// ledger at rest: 32 random bytes (AES-256), written as 64 hexadecimal digits
// (what `docket keygen` and `openssl rand -hex 32` print) or as standard
// base64 (`openssl rand -base64 32`).
//
// A Key never shows its bytes when printed, logged (slog.LogValuer) or
// formatted with %v, %s, %q or %#v: only its ID, a fingerprint that names the
// key in backups and errors without revealing it.
//
// Imports: the standard library and docket's ledger package (for ErrKey).
package masterkey

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/docketrun/docket/ledger"
)

// Size is a master key's length in bytes (AES-256).
const Size = 32

// Env is the environment variable that holds a master key when no key file
// is given.
const Env = "DOCKET_ENCRYPTION_KEY"

// Key is a master key. The zero Key is not a valid key; use Parse, Read,
// Load or Generate.
type Key struct {
	b  [Size]byte
	ok bool
}

// Generate makes a new random key.
func Generate() (Key, error) {
	var k Key
	if _, err := rand.Read(k.b[:]); err != nil {
		return Key{}, fmt.Errorf("masterkey: reading random bytes: %w", err)
	}
	k.ok = true
	return k, nil
}

// Parse reads a key written as 64 hexadecimal digits or as standard base64
// of 32 bytes; surrounding white space is ignored. Errors: ledger.ErrKey,
// saying what is wrong with the text but not repeating it.
func Parse(text []byte) (Key, error) {
	s := string(bytes.TrimSpace(text))
	var k Key
	switch {
	case s == "":
		return Key{}, fmt.Errorf("%w: the key is empty (want 64 hexadecimal digits, e.g. from docket keygen or openssl rand -hex 32)", ledger.ErrKey)
	case strings.ContainsAny(s, " \t\r\n"):
		return Key{}, fmt.Errorf("%w: the key holds white space inside it (want one key: 64 hexadecimal digits or base64 of 32 bytes)", ledger.ErrKey)
	case len(s) == 2*Size:
		if _, err := hex.Decode(k.b[:], []byte(s)); err != nil {
			return Key{}, fmt.Errorf("%w: the key has 64 characters but is not hexadecimal", ledger.ErrKey)
		}
	default:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != Size {
			return Key{}, fmt.Errorf("%w: the key is %d characters long: want 64 hexadecimal digits (32 bytes, AES-256) or base64 of 32 bytes", ledger.ErrKey, len(s))
		}
		copy(k.b[:], b)
	}
	if k.b == ([Size]byte{}) {
		return Key{}, fmt.Errorf("%w: the key is all zeros (make one with docket keygen)", ledger.ErrKey)
	}
	k.ok = true
	return k, nil
}

// Read reads a key file (Parse). Errors: ledger.ErrKey (malformed), the
// file's error.
func Read(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("reading encryption key file: %w", err)
	}
	k, err := Parse(b)
	if err != nil {
		return Key{}, fmt.Errorf("encryption key file %s: %w", path, err)
	}
	return k, nil
}

// Load finds the key of a command: the key file when path is not empty,
// else the environment variable Env (read through getenv). ok is false when
// neither gives one: the ledger is not encrypted.
func Load(path string, getenv func(string) string) (k Key, ok bool, err error) {
	if path != "" {
		k, err = Read(path)
		return k, err == nil, err
	}
	if getenv == nil {
		return Key{}, false, nil
	}
	v := getenv(Env)
	if v == "" {
		return Key{}, false, nil
	}
	k, err = Parse([]byte(v))
	if err != nil {
		return Key{}, false, fmt.Errorf("$%s: %w", Env, err)
	}
	return k, true, nil
}

// Valid says whether k holds a key.
func (k Key) Valid() bool { return k.ok }

// Bytes returns a copy of the key's bytes (for the cipher; never print it).
func (k Key) Bytes() []byte {
	b := k.b
	return b[:]
}

// Hex is the key as 64 hexadecimal digits, the key file's format (for
// docket keygen only).
func (k Key) Hex() string { return hex.EncodeToString(k.b[:]) }

// ID names the key without revealing it: "k" and 16 hexadecimal digits of a
// SHA-256 over a fixed label and the key. Backups and errors carry it, so a
// wrong key is told from a missing one.
func (k Key) ID() string {
	if !k.ok {
		return ""
	}
	h := sha256.New()
	h.Write([]byte("docket master key id\x00"))
	h.Write(k.b[:])
	return "k" + hex.EncodeToString(h.Sum(nil)[:8])
}

// String shows the key's ID only.
func (k Key) String() string {
	if !k.ok {
		return "masterkey(none)"
	}
	return "masterkey(" + k.ID() + ")"
}

// GoString shows the key's ID only (%#v).
func (k Key) GoString() string { return k.String() }

// Format shows the key's ID only, whatever the verb.
func (k Key) Format(f fmt.State, verb rune) { fmt.Fprint(f, k.String()) }

// LogValue shows the key's ID only.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

var _ slog.LogValuer = Key{}
