package postgres

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

// Envelope encryption (Config.Keyring). Each value that may hold a
// person's or a tool's data is sealed on its own, when it is encoded for a
// statement, and opened when it is scanned; the rules (ledger.Eval) and
// the caches of a transaction see plaintext only. A sealed value is
//
//	"\x00dk1", len(key id) u8, key id, wrap nonce [12], data key sealed
//	with the master key [32+16], nonce [12], value sealed with the data key
//
// with a new random AES-256 data key per value, AES-256-GCM for both
// seals, and the column's name as additional data (a value moved to another
// column does not open). Text columns (errors, goals) hold
// "docket-enc:1:" and the base64 of the same bytes. A value without the
// prefix is plaintext, written before the ledger was encrypted: it reads as
// it is. The key id names the master key that wrapped the data key, so
// after a rotation (a new current key in the keyring, the old one kept
// after it) old values still open.
const (
	sealPrefix = "\x00dk1"
	textPrefix = "docket-enc:1:"
	metaKeys   = "encryption_keys" // the meta row listing every master key id that sealed a value
)

// envelope seals and opens values with a keyring; nil: plaintext.
type envelope struct {
	kr    *masterkey.Keyring
	cur   string                 // the current key's id
	wraps map[string]cipher.AEAD // per master key id
}

func newEnvelope(kr *masterkey.Keyring) (*envelope, error) {
	if kr == nil {
		return nil, nil
	}
	e := &envelope{kr: kr, cur: kr.Current().ID(), wraps: map[string]cipher.AEAD{}}
	for _, id := range kr.IDs() {
		a, err := gcm(kr.Key(id).Bytes())
		if err != nil {
			return nil, err
		}
		e.wraps[id] = a
	}
	return e, nil
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return cipher.NewGCM(b)
}

// seal returns v sealed for column col; empty values stay empty (NULL).
func (e *envelope) seal(col string, v []byte) []byte {
	if e == nil || len(v) == 0 {
		return v
	}
	var dk [32]byte
	rand.Read(dk[:]) // crypto/rand.Read does not fail (it crashes the program first)
	data, err := gcm(dk[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	out := make([]byte, 0, len(sealPrefix)+1+len(e.cur)+12+48+12+len(v)+16)
	out = append(out, sealPrefix...)
	out = append(out, byte(len(e.cur)))
	out = append(out, e.cur...)
	head := len(out)
	out = out[:head+12]
	rand.Read(out[head:])
	out = e.wraps[e.cur].Seal(out, out[head:head+12], dk[:], []byte(col))
	n := len(out)
	out = out[:n+12]
	rand.Read(out[n:])
	return data.Seal(out, out[n:n+12], v, []byte(col))
}

// open returns the plaintext of a value of column col. Errors: ledger.ErrKey
// (sealed with a key the keyring lacks, or no keyring), a damaged value.
func (e *envelope) open(col string, v []byte) ([]byte, error) {
	if !bytes.HasPrefix(v, []byte(sealPrefix)) {
		return v, nil
	}
	rest := v[len(sealPrefix):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0])+12+48+12+16 {
		return nil, fmt.Errorf("%w: an encrypted value of %s is cut short", ledger.ErrFormat, col)
	}
	id := string(rest[1 : 1+rest[0]])
	rest = rest[1+rest[0]:]
	if e == nil {
		return nil, fmt.Errorf("%w: the ledger holds values encrypted with key %s and no encryption key was given", ledger.ErrKey, id)
	}
	wrap, ok := e.wraps[id]
	if !ok {
		return nil, fmt.Errorf("%w: a value of %s is encrypted with key %s, which the keyring (%s) lacks: keep old keys in the keyring after the current one", ledger.ErrKey, col, id, strings.Join(e.kr.IDs(), ", "))
	}
	dk, err := wrap.Open(nil, rest[:12], rest[12:60], []byte(col))
	if err != nil {
		return nil, fmt.Errorf("%w: the data key of a value of %s does not authenticate with key %s (damaged, or moved from another column)", ledger.ErrFormat, col, id)
	}
	data, err := gcm(dk)
	if err != nil {
		return nil, err
	}
	plain, err := data.Open(nil, rest[60:72], rest[72:], []byte(col))
	if err != nil {
		return nil, fmt.Errorf("%w: an encrypted value of %s does not authenticate (damaged)", ledger.ErrFormat, col)
	}
	return plain, nil
}

// sealText is seal for a text column.
func (e *envelope) sealText(col, s string) string {
	if e == nil || s == "" {
		return s
	}
	return textPrefix + b64(e.seal(col, []byte(s)))
}

// openText is open for a text column.
func (e *envelope) openText(col, s string) (string, error) {
	if !strings.HasPrefix(s, textPrefix) {
		return s, nil
	}
	b, err := decodeText(col, s)
	if err != nil {
		return "", err
	}
	p, err := e.open(col, b)
	return string(p), err
}

// decodeText returns the sealed bytes of a sealed text.
func decodeText(col, s string) ([]byte, error) {
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimPrefix(s, textPrefix))
	if err != nil {
		return nil, fmt.Errorf("%w: an encrypted text of %s is not base64", ledger.ErrFormat, col)
	}
	return b, nil
}

func b64(b []byte) string { return base64.RawStdEncoding.EncodeToString(b) }

// openInto opens each (column, value) pair in place.
func (e *envelope) openInto(pairs ...any) error {
	for i := 0; i < len(pairs); i += 2 {
		col := pairs[i].(string)
		switch p := pairs[i+1].(type) {
		case *[]byte:
			v, err := e.open(col, *p)
			if err != nil {
				return err
			}
			*p = v
		case *string:
			v, err := e.openText(col, *p)
			if err != nil {
				return err
			}
			*p = v
		}
	}
	return nil
}

// checkKeys makes the keyring and the ledger agree, before this node writes
// anything: the meta row metaKeys lists every master key that sealed a
// value. A ledger that lists keys refuses a node without a keyring, or
// with a keyring that lacks one of them (ledger.ErrKey); a node with a
// keyring adds its current key to the list.
func (s *Store) checkKeys(ctx context.Context) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Nodes opening together take turns (each adds its key to the list).
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('docket.ledger.keys:' || $1, 0))`, s.cfg.Schema); err != nil {
		return fmt.Errorf("taking the keys lock: %w", err)
	}
	qs := pgx.Identifier{s.cfg.Schema}.Sanitize()
	var v string
	err = tx.QueryRow(ctx, `SELECT value FROM `+qs+`.meta WHERE name = $1 FOR UPDATE`, metaKeys).Scan(&v)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("reading the ledger's encryption keys: %w", err)
	}
	have := strings.Fields(v)
	if s.env == nil {
		if len(have) > 0 {
			return fmt.Errorf("%w: the shared ledger is encrypted (keys %s) and no encryption key was given", ledger.ErrKey, strings.Join(have, ", "))
		}
		return nil
	}
	var missing []string
	for _, id := range have {
		if !s.env.kr.Key(id).Valid() {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the shared ledger holds values encrypted with keys %s, which the keyring given (%s) lacks: nothing was read or written",
			ledger.ErrKey, strings.Join(missing, ", "), strings.Join(s.env.kr.IDs(), ", "))
	}
	if slices.Contains(have, s.env.cur) {
		return nil
	}
	have = append(have, s.env.cur)
	if _, err := tx.Exec(ctx, `INSERT INTO `+qs+`.meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`,
		metaKeys, strings.Join(have, " ")); err != nil {
		return fmt.Errorf("recording the ledger's encryption keys: %w", err)
	}
	return tx.Commit(ctx)
}
