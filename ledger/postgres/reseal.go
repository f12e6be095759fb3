package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// sealedTable is a table with the columns that envelope encryption seals.
type sealedTable struct {
	name  string
	pk    []string
	bytea []string // bytea columns
	text  []string // text columns
}

// sealedTables lists every sealed column (crypt.go; ledger/README.md,
// Encryption at rest).
var sealedTables = []sealedTable{
	{name: "runs", pk: []string{"run_id"}, text: []string{"goal", "error"}},
	{name: "actions", pk: []string{"run_id", "revision", "action_id"}, bytea: []string{"args", "approved_args"}, text: []string{"error"}},
	{name: "keys", pk: []string{"key"}, bytea: []string{"args", "output"}, text: []string{"error"}},
	{name: "revisions", pk: []string{"run_id", "revision"}, bytea: []string{"plan"}},
	{name: "events", pk: []string{"run_id", "seq"}, bytea: []string{"data"}},
	{name: "memos", pk: []string{"run_id", "name"}, bytea: []string{"value"}},
	{name: "blobs", pk: []string{"run_id", "hash"}, bytea: []string{"value"}},
	{name: "schedules", pk: []string{"id"}, bytea: []string{"doc"}},
}

// ResealStats says what Reseal did.
type ResealStats struct {
	Resealed int // values sealed again under the current key (their data keys rewrapped)
	Sealed   int // plaintext values (written before the ledger was encrypted) sealed
	Left     int // values that still use another key or are plaintext (changed meanwhile)
}

// Reseal moves every value of the ledger to the keyring's current key:
// the data key of a value sealed with an older key is sealed again with the
// current one (the value's own ciphertext is kept), and a plaintext value
// is sealed. Each value is one conditional UPDATE, so an interrupted Reseal
// leaves every value readable under the keyring, and running it again goes
// on. When no value is left on another key, the ledger's list of keys in
// use becomes the current key alone, and the older keys may be removed
// from the keyring. Nodes still writing with an older current key would
// put values under it again: restart every node with the new keyring
// (the new key first) before resealing. Errors: ledger.ErrInvalid (the
// store has no keyring), ledger.ErrKey (a value sealed with a key the
// keyring lacks), the context's, database errors.
func (s *Store) Reseal(ctx context.Context) (ResealStats, error) {
	var st ResealStats
	if s.env == nil {
		return st, fmt.Errorf("%w: resealing needs a keyring", ledger.ErrInvalid)
	}
	for _, t := range sealedTables {
		if err := s.resealTable(ctx, t, &st); err != nil {
			return st, fmt.Errorf("ledger: resealing %s: %w", t.name, err)
		}
	}
	if st.Left > 0 {
		return st, nil
	}
	qs := pgx.Identifier{s.cfg.Schema}.Sanitize()
	_, err := s.pool.Exec(ctx, `UPDATE `+qs+`.meta SET value = $2 WHERE name = $1`, metaKeys, s.env.cur)
	if err != nil {
		return st, fmt.Errorf("ledger: recording the keys in use: %w", err)
	}
	return st, nil
}

const resealPage = 500

func (s *Store) resealTable(ctx context.Context, t sealedTable, st *ResealStats) error {
	qt := pgx.Identifier{s.cfg.Schema, t.name}.Sanitize()
	pk := strings.Join(t.pk, ", ")
	cols := append(append([]string(nil), t.bytea...), t.text...)
	var last []any
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		q := `SELECT ` + pk + `, ` + strings.Join(cols, ", ") + ` FROM ` + qt
		if last != nil {
			q += ` WHERE (` + pk + `) > (` + resealParams(1, len(t.pk)) + `)`
		}
		q += ` ORDER BY ` + pk + fmt.Sprintf(` LIMIT %d`, resealPage)
		changes, n, next, err := s.resealRead(ctx, t, q, last, st)
		if err != nil {
			return err
		}
		if next != nil {
			last = next
		}
		for _, c := range changes {
			args := append([]any{c.new, c.old}, c.key...)
			tag, err := s.pool.Exec(ctx, `UPDATE `+qt+` SET `+c.col+` = $1 WHERE `+c.col+` = $2 AND (`+pk+`) = (`+resealParams(3, len(t.pk))+`)`, args...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				st.Left++ // changed meanwhile: its writer sealed it
			}
		}
		if n < resealPage {
			return nil
		}
	}
}

// resealParams returns the placeholders $from, ..., $from+n-1.
func resealParams(from, n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("$%d", from+i)
	}
	return strings.Join(p, ", ")
}

// resealChange is one value to write back: col of the row at key, from old
// to new.
type resealChange struct {
	key      []any
	col      string
	old, new any
}

// resealRead reads one page of t with q (args: the key of the last row of
// the page before) and returns the changes its values need, how many rows
// it read and the key of its last row (nil: none).
func (s *Store) resealRead(ctx context.Context, t sealedTable, q string, args []any, st *ResealStats) (changes []resealChange, n int, last []any, err error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, nil, err
	}
	for rows.Next() {
		n++
		key := make([]any, len(t.pk))
		bs := make([][]byte, len(t.bytea))
		ts := make([]*string, len(t.text))
		dest := make([]any, 0, len(key)+len(t.bytea)+len(t.text))
		for i := range key {
			dest = append(dest, &key[i])
		}
		for i := range bs {
			dest = append(dest, &bs[i])
		}
		for i := range ts {
			dest = append(dest, &ts[i])
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, 0, nil, err
		}
		last = key
		if changes, err = s.resealRow(t, key, bs, ts, changes, st); err != nil {
			rows.Close()
			return nil, 0, nil, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, nil, err
	}
	return changes, n, last, nil
}

// resealRow appends to changes those of the row at key, with bytea values
// bs and text values ts.
func (s *Store) resealRow(t sealedTable, key []any, bs [][]byte, ts []*string, changes []resealChange, st *ResealStats) ([]resealChange, error) {
	for i, col := range t.bytea {
		c := t.name + "." + col
		nv, plain, err := s.env.reseal(c, bs[i])
		if err != nil {
			return changes, err
		}
		if nv != nil {
			changes = append(changes, resealChange{key, col, bs[i], nv})
			st.add(plain)
		}
	}
	for i, col := range t.text {
		if ts[i] == nil || *ts[i] == "" {
			continue
		}
		c := t.name + "." + col
		v := []byte(*ts[i])
		if strings.HasPrefix(*ts[i], textPrefix) {
			var err error
			if v, err = decodeText(c, *ts[i]); err != nil {
				return changes, err
			}
		}
		nv, plain, err := s.env.reseal(c, v)
		if err != nil {
			return changes, err
		}
		if nv != nil {
			changes = append(changes, resealChange{key, col, *ts[i], textPrefix + b64(nv)})
			st.add(plain)
		}
	}
	return changes, nil
}

func (st *ResealStats) add(plain bool) {
	if plain {
		st.Sealed++
	} else {
		st.Resealed++
	}
}

// reseal returns v sealed under the current key (nil: it already is, or it
// is empty); plain reports that v was plaintext.
func (e *envelope) reseal(col string, v []byte) (out []byte, plain bool, err error) {
	if len(v) == 0 {
		return nil, false, nil
	}
	if !bytes.HasPrefix(v, []byte(sealPrefix)) {
		return e.seal(col, v), true, nil
	}
	rest := v[len(sealPrefix):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0])+12+48+12+16 {
		return nil, false, fmt.Errorf("%w: an encrypted value of %s is cut short", ledger.ErrFormat, col)
	}
	id := string(rest[1 : 1+rest[0]])
	if id == e.cur {
		return nil, false, nil
	}
	wrap, ok := e.wraps[id]
	if !ok {
		return nil, false, fmt.Errorf("%w: a value of %s is encrypted with key %s, which the keyring lacks", ledger.ErrKey, col, id)
	}
	body := rest[1+rest[0]:]
	dk, err := wrap.Open(nil, body[:12], body[12:60], []byte(col))
	if err != nil {
		return nil, false, fmt.Errorf("%w: the data key of a value of %s does not authenticate with key %s", ledger.ErrFormat, col, id)
	}
	out = append(out, sealPrefix...)
	out = append(out, byte(len(e.cur)))
	out = append(out, e.cur...)
	head := len(out)
	out = append(out, make([]byte, 12)...)
	rand.Read(out[head:])
	out = e.wraps[e.cur].Seal(out, out[head:head+12], dk, []byte(col))
	return append(out, body[60:]...), false, nil
}
