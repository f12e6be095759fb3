package badgerdb

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

// An encrypted backup (the ledger has Config.Key) is a whole plain backup
// stream (backup.go), sealed in chunks with AES-256-GCM:
//
//	header  "DOCKETBE", version u8 (1), len(key id) u8, key id, salt [32]
//	chunk*  length u32 BE (bit 31: the last chunk; the rest: plaintext
//	        bytes, at most sealChunk), sealed bytes (length + 16)
//
// Each backup has its own AES-256 key, HKDF-SHA256 of the master key with
// the header's random salt. Chunk i is sealed with the nonce i (big endian,
// 12 bytes) and the header plus its own length word as additional data, so a
// chunk that is changed, dropped, reordered or moved into another backup
// fails to open, and a stream cut at a chunk boundary lacks its last chunk:
// all ErrCorrupt. The key id names the master key, so a restore with another
// key says so (ledger.ErrKey) before it reads anything else.
const (
	sealMagic   = "DOCKETBE"
	sealVersion = 1
	sealChunk   = 1 << 20
	sealLast    = 1 << 31
	saltSize    = 32
)

func backupAEAD(key masterkey.Key, salt []byte) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, key.Bytes(), salt, "docket backup v1", 32)
	if err != nil {
		return nil, fmt.Errorf("ledger: deriving the backup key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return cipher.NewGCM(block)
}

// sealWriter seals what it is given into chunks; Close writes the last.
type sealWriter struct {
	w    io.Writer
	aead cipher.AEAD
	hdr  []byte
	buf  []byte
	out  []byte
	n    uint64
	err  error
}

func newSealWriter(w io.Writer, key masterkey.Key) (*sealWriter, error) {
	id := key.ID()
	hdr := append([]byte(sealMagic), sealVersion, byte(len(id)))
	hdr = append(hdr, id...)
	salt := make([]byte, saltSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("ledger: making the backup's salt: %w", err)
	}
	hdr = append(hdr, salt...)
	aead, err := backupAEAD(key, salt)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, fmt.Errorf("ledger: writing backup header: %w", err)
	}
	return &sealWriter{w: w, aead: aead, hdr: hdr, buf: make([]byte, 0, sealChunk)}, nil
}

func (s *sealWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if s.err != nil {
			return n, s.err
		}
		k := min(len(p), sealChunk-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		n += k
		p = p[k:]
		if len(s.buf) == sealChunk {
			s.seal(false)
		}
	}
	return n, s.err
}

// Close seals what is buffered as the last chunk (it does not close w).
func (s *sealWriter) Close() error {
	if s.err == nil {
		s.seal(true)
	}
	return s.err
}

func (s *sealWriter) seal(last bool) {
	word := uint32(len(s.buf))
	if last {
		word |= sealLast
	}
	var lw [4]byte
	binary.BigEndian.PutUint32(lw[:], word)
	s.out = append(s.out[:0], lw[:]...)
	s.out = s.aead.Seal(s.out, chunkNonce(s.n), s.buf, chunkAD(s.hdr, lw))
	if _, err := s.w.Write(s.out); err != nil {
		s.err = fmt.Errorf("ledger: writing backup: %w", err)
	}
	s.n++
	s.buf = s.buf[:0]
}

func chunkNonce(i uint64) []byte {
	var n [12]byte
	binary.BigEndian.PutUint64(n[4:], i)
	return n[:]
}

func chunkAD(hdr []byte, lw [4]byte) []byte {
	return append(append(make([]byte, 0, len(hdr)+4), hdr...), lw[:]...)
}

// openReader returns the plaintext of an encrypted backup, io.EOF only after
// its last chunk and the stream's end, ErrCorrupt for a damaged or cut
// stream.
type openReader struct {
	r    io.Reader
	aead cipher.AEAD
	hdr  []byte
	buf  []byte // unread plaintext of the current chunk
	in   []byte
	n    uint64
	done bool
	err  error
}

// openBackup reads an encrypted backup's header from r (whose magic was
// peeked, not read) and returns the reader of its plaintext. Errors:
// ledger.ErrKey (no key, or another key than the backup's), ErrCorrupt,
// ledger.ErrFormat (a version this build does not know).
func openBackup(r *bufio.Reader, key masterkey.Key) (io.Reader, error) {
	var h [len(sealMagic) + 2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("%w: encrypted backup header cut short", ErrCorrupt)
	}
	if h[len(sealMagic)] != sealVersion {
		return nil, fmt.Errorf("%w: encrypted backup of version %d, which this build does not know", ledger.ErrFormat, h[len(sealMagic)])
	}
	rest := make([]byte, int(h[len(sealMagic)+1])+saltSize)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("%w: encrypted backup header cut short", ErrCorrupt)
	}
	id, salt := string(rest[:len(rest)-saltSize]), rest[len(rest)-saltSize:]
	switch {
	case !key.Valid():
		return nil, fmt.Errorf("%w: the backup is encrypted (key %s) and no key was given: give the key of the ledger it was taken from", ledger.ErrKey, id)
	case key.ID() != id:
		return nil, fmt.Errorf("%w: the backup is encrypted with key %s, and the key given is %s; nothing was restored", ledger.ErrKey, id, key.ID())
	}
	aead, err := backupAEAD(key, salt)
	if err != nil {
		return nil, err
	}
	hdr := append(h[:], rest...)
	return &openReader{r: r, aead: aead, hdr: hdr}, nil
}

func (o *openReader) Read(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	for len(o.buf) == 0 {
		if o.done {
			return 0, io.EOF
		}
		if err := o.next(); err != nil {
			o.err = err
			return 0, err
		}
	}
	n := copy(p, o.buf)
	o.buf = o.buf[n:]
	return n, nil
}

func (o *openReader) next() error {
	var lw [4]byte
	if _, err := io.ReadFull(o.r, lw[:]); err != nil {
		return o.readErr(err)
	}
	word := binary.BigEndian.Uint32(lw[:])
	size := int(word &^ sealLast)
	if size > sealChunk {
		return fmt.Errorf("%w: encrypted chunk %d of %d bytes (at most %d)", ErrCorrupt, o.n, size, sealChunk)
	}
	o.in = append(o.in[:0], make([]byte, size+o.aead.Overhead())...)
	if _, err := io.ReadFull(o.r, o.in); err != nil {
		return o.readErr(err)
	}
	plain, err := o.aead.Open(o.in[:0], chunkNonce(o.n), o.in, chunkAD(o.hdr, lw))
	if err != nil {
		return fmt.Errorf("%w: encrypted chunk %d does not authenticate (damaged, or not of this backup)", ErrCorrupt, o.n)
	}
	o.n++
	o.buf = plain
	if word&sealLast != 0 {
		var extra [1]byte
		if k, _ := io.ReadFull(o.r, extra[:]); k != 0 {
			return fmt.Errorf("%w: data after the last encrypted chunk", ErrCorrupt)
		}
		o.done = true
	}
	return nil
}

func (o *openReader) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: encrypted stream ends inside chunk %d, before its last chunk (truncated?)", ErrCorrupt, o.n)
	}
	return fmt.Errorf("ledger: reading backup: %w", err)
}
