package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

func keyring(t testing.TB, n int) *masterkey.Keyring {
	t.Helper()
	var keys []masterkey.Key
	for range n {
		k, err := masterkey.Generate()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	kr, err := masterkey.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// Sealed values open only in their column, with their key, whole.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	e, err := newEnvelope(keyring(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	v := []byte(`{"token":"secret"}`)
	sealed := e.seal("keys.args", v)
	if bytes.Contains(sealed, []byte("secret")) || bytes.Equal(sealed, e.seal("keys.args", v)) {
		t.Fatal("sealing shows the value or is deterministic")
	}
	if got, err := e.open("keys.args", sealed); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("open: %s %v", got, err)
	}
	if _, err := e.open("keys.output", sealed); !errors.Is(err, ledger.ErrFormat) {
		t.Fatalf("opened in another column: %v", err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x40
		if got, err := e.open("keys.args", bad); err == nil && bytes.Equal(got, v) && i >= len(sealPrefix) {
			t.Fatalf("a value changed at byte %d still opens", i)
		}
	}
	if _, err := e.open("keys.args", sealed[:len(sealed)-1]); err == nil {
		t.Fatal("a cut value opens")
	}
	other, _ := newEnvelope(keyring(t, 1))
	if _, err := other.open("keys.args", sealed); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("another keyring: %v", err)
	}
	var none *envelope
	if _, err := none.open("keys.args", sealed); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("no keyring: %v", err)
	}
	if got, err := none.open("keys.args", v); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("plaintext without a keyring: %s %v", got, err)
	}
	txt := e.sealText("keys.error", "upstream said secret")
	if !strings.HasPrefix(txt, textPrefix) || strings.Contains(txt, "secret") {
		t.Fatalf("sealed text %q", txt)
	}
	if got, err := e.openText("keys.error", txt); err != nil || got != "upstream said secret" {
		t.Fatalf("openText: %q %v", got, err)
	}
}

// BenchmarkSeal: sealing and opening one value (a data key per value).
func BenchmarkSeal(b *testing.B) {
	e, err := newEnvelope(keyring(b, 1))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{200, 64 << 10} {
		v := bytes.Repeat([]byte("x"), n)
		b.Run(fmt.Sprintf("seal/%dB", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				e.seal("keys.output", v)
			}
		})
		s := e.seal("keys.output", v)
		b.Run(fmt.Sprintf("open/%dB", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, err := e.open("keys.output", s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
