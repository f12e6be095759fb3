package masterkey_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

func TestParse(t *testing.T) {
	t.Parallel()
	k, err := masterkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(k.Bytes())
	for _, c := range []struct {
		name, text string
		ok         bool
	}{
		{"hex", k.Hex(), true},
		{"hex with newline", k.Hex() + "\n", true},
		{"upper hex", strings.ToUpper(k.Hex()), true},
		{"base64", b64, true},
		{"empty", "  \n", false},
		{"short hex", k.Hex()[:62], false},
		{"not hex", "zz" + k.Hex()[2:], false},
		{"base64 of 16 bytes", base64.StdEncoding.EncodeToString(k.Bytes()[:16]), false},
		{"two keys", k.Hex() + "\n" + k.Hex(), false},
		{"zeros", strings.Repeat("0", 64), false},
	} {
		got, err := masterkey.Parse([]byte(c.text))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.ok && got.ID() != k.ID():
			t.Errorf("%s: parsed another key", c.name)
		case !c.ok && !errors.Is(err, ledger.ErrKey):
			t.Errorf("%s: %v, want ledger.ErrKey", c.name, err)
		case !c.ok && len(c.text) > 8 && strings.Contains(err.Error(), strings.TrimSpace(c.text)[:8]):
			t.Errorf("%s: the error repeats the key text: %v", c.name, err)
		}
	}
}

// A key shows only its id however it is printed or logged.
func TestKeyRedacts(t *testing.T) {
	t.Parallel()
	k, err := masterkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("opening", "key", k, "cfg", struct{ Key masterkey.Key }{k})
	outs := []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s %q %x", k, k, k, k, k, k),
		fmt.Sprintf("%+v %#v", struct{ Key masterkey.Key }{k}, struct{ Key masterkey.Key }{k}), logged.String()}
	b64 := base64.StdEncoding.EncodeToString(k.Bytes())
	for _, s := range outs {
		if strings.Contains(strings.ToLower(s), k.Hex()[:16]) || strings.Contains(s, b64[:16]) || !strings.Contains(s, k.ID()) {
			t.Errorf("printed as %q: shows the key or not its id", s)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	k, _ := masterkey.Generate()
	k2, _ := masterkey.Generate()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(k.Hex()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == masterkey.Env {
				return v
			}
			return ""
		}
	}
	if got, ok, err := masterkey.Load(path, env(k2.Hex())); err != nil || !ok || got.ID() != k.ID() {
		t.Fatalf("file and env: %v %v %v, want the file's key", got, ok, err)
	}
	if got, ok, err := masterkey.Load("", env(k2.Hex())); err != nil || !ok || got.ID() != k2.ID() {
		t.Fatalf("env: %v %v %v", got, ok, err)
	}
	if _, ok, err := masterkey.Load("", env("")); err != nil || ok {
		t.Fatalf("none: %v %v", ok, err)
	}
	if _, _, err := masterkey.Load("", env("nope")); !errors.Is(err, ledger.ErrKey) || !strings.Contains(err.Error(), masterkey.Env) {
		t.Fatalf("bad env: %v", err)
	}
	if _, _, err := masterkey.Load(filepath.Join(t.TempDir(), "missing"), env("")); err == nil {
		t.Fatal("missing file: no error")
	}
}

func TestKeyring(t *testing.T) {
	t.Parallel()
	a, _ := masterkey.Generate()
	b, _ := masterkey.Generate()
	kr, err := masterkey.ParseKeyring([]byte("# rotated\n" + b.Hex() + "\n\n# the old key\n" + a.Hex() + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if kr.Current().ID() != b.ID() || kr.Len() != 2 || !kr.Key(a.ID()).Valid() || kr.Key("k0000").Valid() {
		t.Fatalf("keyring %v", kr)
	}
	if s := fmt.Sprintf("%v %+v %#v", kr, kr, kr); strings.Contains(s, a.Hex()[:16]) || strings.Contains(s, b.Hex()[:16]) {
		t.Fatalf("the keyring prints a key: %s", s)
	}
	for name, text := range map[string]string{
		"empty":     "# nothing\n",
		"duplicate": a.Hex() + "\n" + a.Hex(),
		"bad line":  a.Hex() + "\nnope\n",
	} {
		if _, err := masterkey.ParseKeyring([]byte(text)); !errors.Is(err, ledger.ErrKey) {
			t.Errorf("%s: %v, want ErrKey", name, err)
		}
	}
	env := func(name string) string {
		if name == masterkey.Env {
			return b.Hex() + "," + a.Hex()
		}
		return ""
	}
	if kr, err := masterkey.LoadKeyring("", env); err != nil || kr.Len() != 2 || kr.Current().ID() != b.ID() {
		t.Fatalf("keyring from the environment: %v %v", kr, err)
	}
	if kr, err := masterkey.LoadKeyring("", func(string) string { return "" }); err != nil || kr != nil {
		t.Fatalf("no keyring: %v %v", kr, err)
	}
}

// FuzzParseKeyring: any text is a keyring of valid keys or ledger.ErrKey,
// and an error never repeats a line of the text.
func FuzzParseKeyring(f *testing.F) {
	k, _ := masterkey.Generate()
	f.Add([]byte(k.Hex()))
	f.Add([]byte("# c\n" + k.Hex() + "\n" + strings.ToUpper(k.Hex())))
	f.Add([]byte("not a key at all, 1234567890"))
	f.Fuzz(func(t *testing.T, text []byte) {
		kr, err := masterkey.ParseKeyring(text)
		if err != nil {
			if !errors.Is(err, ledger.ErrKey) {
				t.Fatalf("%v is not ErrKey", err)
			}
			for _, line := range strings.Split(string(text), "\n") {
				if l := strings.TrimSpace(line); len(l) >= 16 && strings.Contains(err.Error(), l) {
					t.Fatalf("the error repeats the text: %v", err)
				}
			}
			return
		}
		for _, id := range kr.IDs() {
			if !kr.Key(id).Valid() {
				t.Fatalf("key %s is not valid", id)
			}
		}
	})
}
