package badgerdb

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

// FuzzEncryptedBackup: an encrypted backup stream, changed anyhow, either
// opens to exactly the plaintext sealed into it or fails with ErrCorrupt,
// ErrFormat or ErrKey; it never panics and never yields other bytes.
func FuzzEncryptedBackup(f *testing.F) {
	key, err := masterkey.Parse(bytes.Repeat([]byte("ab"), 32))
	if err != nil {
		f.Fatal(err)
	}
	seal := func(plain []byte) []byte {
		var buf bytes.Buffer
		sw, err := newSealWriter(&buf, key)
		if err != nil {
			f.Fatal(err)
		}
		sw.Write(plain)
		if err := sw.Close(); err != nil {
			f.Fatal(err)
		}
		return buf.Bytes()
	}
	plain := bytes.Repeat([]byte("docket backup frame "), 100)
	f.Add(seal(plain), 0, byte(0))
	f.Add(seal(nil), 3, byte(1))
	f.Add(seal(plain), 70, byte(0x80))
	f.Fuzz(func(t *testing.T, stream []byte, at int, flip byte) {
		if len(stream) > 0 && at >= 0 {
			stream = bytes.Clone(stream)
			stream[at%len(stream)] ^= flip
		}
		br := bufio.NewReader(bytes.NewReader(stream))
		if magic, _ := br.Peek(len(sealMagic)); string(magic) != sealMagic {
			return
		}
		r, err := openBackup(br, key)
		if err == nil {
			var got []byte
			got, err = io.ReadAll(r)
			if err == nil && !bytes.Equal(got, plain) && len(got) != 0 {
				t.Fatalf("a changed stream opened to %d other bytes", len(got))
			}
		}
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ledger.ErrFormat) && !errors.Is(err, ledger.ErrKey) {
			t.Fatalf("error %v is none of ErrCorrupt, ErrFormat, ErrKey", err)
		}
	})
}
