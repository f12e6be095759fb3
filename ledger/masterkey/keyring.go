package masterkey

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/docketrun/docket/ledger"
)

// Keyring is a current key, which encrypts what is written, and older keys,
// which still decrypt what they encrypted: the shared ledger's master keys
// across rotations. Its text form is one key per line (Parse), the current
// one first; blank lines and lines starting with '#' are skipped. A file
// with one key is a keyring of one.
type Keyring struct {
	keys []Key // keys[0] is the current key
}

// NewKeyring makes a keyring of current and older keys.
func NewKeyring(current Key, older ...Key) (*Keyring, error) {
	kr := &Keyring{}
	for _, k := range append([]Key{current}, older...) {
		if !k.Valid() {
			return nil, fmt.Errorf("%w: a keyring holds only valid keys", ledger.ErrKey)
		}
		if kr.Key(k.ID()).Valid() {
			return nil, fmt.Errorf("%w: key %s is in the keyring twice", ledger.ErrKey, k.ID())
		}
		kr.keys = append(kr.keys, k)
	}
	return kr, nil
}

// ParseKeyring reads a keyring's text. Errors: ledger.ErrKey, naming the
// line, never its key.
func ParseKeyring(text []byte) (*Keyring, error) {
	var keys []Key
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := Parse([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ledger.ErrKey, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key (want 64 hexadecimal digits, e.g. from docket keygen)", ledger.ErrKey)
	}
	return NewKeyring(keys[0], keys[1:]...)
}

// LoadKeyring is Load for a keyring: the file at path, else the
// environment variable Env (its keys separated by new lines or commas);
// nil when neither gives one.
func LoadKeyring(path string, getenv func(string) string) (*Keyring, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading encryption key file: %w", err)
		}
		kr, err := ParseKeyring(b)
		if err != nil {
			return nil, fmt.Errorf("encryption key file %s: %w", path, err)
		}
		return kr, nil
	}
	if getenv == nil || getenv(Env) == "" {
		return nil, nil
	}
	kr, err := ParseKeyring([]byte(strings.ReplaceAll(getenv(Env), ",", "\n")))
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", Env, err)
	}
	return kr, nil
}

// Current is the key that encrypts what is written.
func (kr *Keyring) Current() Key { return kr.keys[0] }

// Len is the number of keys.
func (kr *Keyring) Len() int { return len(kr.keys) }

// Key returns the key of id, or the zero Key (not Valid) when the keyring
// lacks it.
func (kr *Keyring) Key(id string) Key {
	for _, k := range kr.keys {
		if k.ID() == id {
			return k
		}
	}
	return Key{}
}

// IDs are the keys' ids, the current one first.
func (kr *Keyring) IDs() []string {
	ids := make([]string, len(kr.keys))
	for i, k := range kr.keys {
		ids[i] = k.ID()
	}
	return ids
}

// String shows the keys' ids only.
func (kr *Keyring) String() string {
	if kr == nil {
		return "keyring(none)"
	}
	return "keyring(" + strings.Join(kr.IDs(), ",") + ")"
}
