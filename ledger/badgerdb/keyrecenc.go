package badgerdb

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Key records are written in a binary encoding framed like encJSONBlob (so
// keyRecOutput reads the output of either without decoding the rest):
//
//	encKeyRec, uvarint length of the fields, the fields, then the output
//	(raw JSON) to the end.
//
// Fields, in order: key, run id, action id, tool, state, owner, error,
// failure, args_ref (each uvarint length + bytes), attempt (uvarint), flags
// (one byte: 1 retryable, 2 maybe_took_effect), claimed_at, updated_at,
// first_claimed_at (each: 0 for the zero time, else 1 and a varint of Unix
// nanoseconds, UTC), then args (uvarint length+1, 0 = none; none when
// args_ref names the blob that holds them, large.go).
//
// Key records written before it (encJSONBlob with storedKeyRec metadata)
// decode as they did.
const encKeyRec = 7

const (
	keyRecRetryable = 1 << iota
	keyRecMaybeTookEffect
)

func encodeKeyRecBinary(k ledger.KeyRecord) []byte {
	args, ref := k.Args, ""
	if h, ok := refHash(k.Args); ok {
		args, ref = nil, h
	}
	m := make([]byte, 0, 160+len(args))
	for _, s := range []string{k.Key, k.RunID, k.ActionID, k.Tool, string(k.State), k.Owner, k.Error, string(k.Failure), ref} {
		m = appendStr(m, s)
	}
	m = binary.AppendUvarint(m, uint64(k.Attempt))
	var flags byte
	if k.Retryable {
		flags |= keyRecRetryable
	}
	if k.MaybeTookEffect {
		flags |= keyRecMaybeTookEffect
	}
	m = append(m, flags)
	for _, t := range []time.Time{k.ClaimedAt, k.UpdatedAt, k.FirstClaimedAt} {
		m = appendTime(m, t)
	}
	if args == nil {
		m = append(m, 0)
	} else {
		m = binary.AppendUvarint(m, uint64(len(args))+1)
		m = append(m, args...)
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(m)+len(k.Output))
	b = append(b, encKeyRec)
	b = binary.AppendUvarint(b, uint64(len(m)))
	b = append(b, m...)
	return append(b, k.Output...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	return binary.AppendVarint(append(b, 1), t.UnixNano())
}

func (d *rowReader) time() time.Time {
	present := d.bytes(1)
	if d.err != nil || present[0] == 0 {
		return time.Time{}
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: truncated record", ledger.ErrFormat)
		return time.Time{}
	}
	d.b = d.b[n:]
	return time.Unix(0, v).UTC()
}

// decodeKeyRecBinary decodes an encKeyRec record; args held in a blob come
// back as a reference, as from decodeKeyRec.
func decodeKeyRecBinary(b []byte) (ledger.KeyRecord, error) {
	var k ledger.KeyRecord
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || uint64(len(b)-1-w) < n {
		return k, fmt.Errorf("%w: corrupt key record header", ledger.ErrFormat)
	}
	d := rowReader{b: b[1+w : 1+w+int(n)]}
	k.Key, k.RunID, k.ActionID, k.Tool = d.str(), d.str(), d.str(), d.str()
	k.State, k.Owner, k.Error, k.Failure = ledger.Status(d.str()), d.str(), d.str(), ledger.Failure(d.str())
	ref := d.str()
	k.Attempt = int(d.uvarint())
	if f := d.bytes(1); d.err == nil {
		k.Retryable, k.MaybeTookEffect = f[0]&keyRecRetryable != 0, f[0]&keyRecMaybeTookEffect != 0
	}
	k.ClaimedAt, k.UpdatedAt, k.FirstClaimedAt = d.time(), d.time(), d.time()
	k.Args = d.raw()
	if d.err != nil {
		return k, d.err
	}
	if len(d.b) != 0 {
		return k, fmt.Errorf("%w: key record %s: %d bytes after its fields", ledger.ErrFormat, k.Key, len(d.b))
	}
	if ref != "" {
		if !validHash(ref) {
			return k, fmt.Errorf("%w: key record names a malformed args blob", ledger.ErrFormat)
		}
		k.Args = refOf(ref)
	}
	if out := b[1+w+int(n):]; len(out) > 0 {
		k.Output = json.RawMessage(append([]byte(nil), out...))
	}
	return k, nil
}
