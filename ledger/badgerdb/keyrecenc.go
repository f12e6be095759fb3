package badgerdb

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/docketrun/docket/ledger"
)

// A key record (x\0<run>\0<key>) is its fields, then its output:
//
//	uvarint length of the fields, the fields, then the output (raw JSON)
//	to the end, so that keyRecOutput reads the output without decoding
//	the rest.
//
// Fields, in order: action id, tool (uvarint length + bytes), state (one
// byte, a code of statusCodes; 0: uvarint length + bytes follow), owner
// (appendOwner), error, failure, args_ref (strings; args_ref names the blob
// holding args of blobref.Large bytes or more, large.go), attempt (uvarint),
// flags (one byte: keyRecRetryable, keyRecMaybeTookEffect,
// keyRecFirstIsClaimed, keyRecUpdatedDelta), claimed_at (appendTime),
// updated_at (a varint of nanoseconds after claimed_at with
// keyRecUpdatedDelta, else appendTime), first_claimed_at (absent with
// keyRecFirstIsClaimed: it equals claimed_at), then the args (appendRaw;
// none when args_ref names them).
//
// The key and the run id are those of the record's Badger key, given to the
// decoder: the record and its Badger key are all it takes to read it.
const (
	keyRecRetryable       = 1 << iota
	keyRecMaybeTookEffect // an earlier attempt may have taken effect
	keyRecFirstIsClaimed  // first_claimed_at equals claimed_at (and is absent)
	keyRecUpdatedDelta    // updated_at is given relative to claimed_at
	keyRecFlags           = 1<<iota - 1
)

// statusCodes are the one-byte codes of the action statuses in key records
// and rows (never renumbered: records on disk hold them).
var statusCodes = []ledger.Status{1: ledger.StatusPending, 2: ledger.StatusApproved, 3: ledger.StatusRejected,
	4: ledger.StatusClaimed, 5: ledger.StatusSucceeded, 6: ledger.StatusFailed, 7: ledger.StatusNeedsReview,
	8: ledger.StatusSkipped, 9: ledger.StatusCompensated}

func appendStatus(b []byte, s ledger.Status) []byte {
	for c, v := range statusCodes {
		if c > 0 && v == s {
			return append(b, byte(c))
		}
	}
	return appendStr(append(b, 0), string(s))
}

func (d *rowReader) status() ledger.Status {
	c := d.bytes(1)
	switch {
	case d.err != nil:
		return ""
	case c[0] == 0:
		return ledger.Status(d.str())
	case int(c[0]) < len(statusCodes):
		return statusCodes[c[0]]
	}
	d.err = fmt.Errorf("%w: unknown status code %d", ledger.ErrFormat, c[0])
	return ""
}

// An owner that is a Badger ledger's incarnation ("inc_" + 16 lowercase hex
// digits) is stored as its 8 bytes, any other as its text.
const (
	ownerText = 0 // uvarint length + bytes
	ownerInc  = 1 // 8 bytes
)

const incPrefix = "inc_"

func appendOwner(b []byte, owner string) []byte {
	if rest, ok := strings.CutPrefix(owner, incPrefix); ok && len(rest) == 16 && strings.ToLower(rest) == rest {
		if raw, err := hex.DecodeString(rest); err == nil {
			return append(append(b, ownerInc), raw...)
		}
	}
	return appendStr(append(b, ownerText), owner)
}

func (d *rowReader) owner() string {
	form := d.bytes(1)
	switch {
	case d.err != nil:
		return ""
	case form[0] == ownerText:
		return d.str()
	case form[0] == ownerInc:
		if raw := d.bytes(8); d.err == nil {
			return incPrefix + hex.EncodeToString(raw)
		}
		return ""
	}
	d.err = fmt.Errorf("%w: unknown owner form %d", ledger.ErrFormat, form[0])
	return ""
}

// encodeKeyRec encodes a key record (its key and run id are its Badger
// key's).
func encodeKeyRec(k ledger.KeyRecord) []byte {
	args, ref := k.Args, ""
	if h, ok := refHash(k.Args); ok {
		args, ref = nil, h
	}
	m := make([]byte, 0, 96+len(args))
	m = appendStr(m, k.ActionID)
	m = appendStr(m, k.Tool)
	m = appendStatus(m, k.State)
	m = appendOwner(m, k.Owner)
	for _, s := range []string{k.Error, string(k.Failure), ref} {
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
	if k.FirstClaimedAt.Equal(k.ClaimedAt) && k.FirstClaimedAt.IsZero() == k.ClaimedAt.IsZero() {
		flags |= keyRecFirstIsClaimed
	}
	if !k.ClaimedAt.IsZero() && !k.UpdatedAt.IsZero() {
		flags |= keyRecUpdatedDelta
	}
	m = append(m, flags)
	m = appendTime(m, k.ClaimedAt)
	if flags&keyRecUpdatedDelta != 0 {
		m = binary.AppendVarint(m, k.UpdatedAt.UnixNano()-k.ClaimedAt.UnixNano())
	} else {
		m = appendTime(m, k.UpdatedAt)
	}
	if flags&keyRecFirstIsClaimed == 0 {
		m = appendTime(m, k.FirstClaimedAt)
	}
	m = appendRaw(m, args)
	b := make([]byte, 0, binary.MaxVarintLen64+len(m)+len(k.Output))
	b = binary.AppendUvarint(b, uint64(len(m)))
	b = append(b, m...)
	return append(b, k.Output...)
}

// decodeKeyRec decodes the key record of (runID, key). Args held in a blob
// come back as a reference (large.go), which the readers resolve.
func decodeKeyRec(runID, key string, b []byte) (k ledger.KeyRecord, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return k, fmt.Errorf("%w: key record %s: corrupt header", ledger.ErrFormat, key)
	}
	k.Key, k.RunID = key, runID
	d := rowReader{b: b[w : w+int(n)]}
	k.ActionID, k.Tool = d.str(), d.str()
	k.State = d.status()
	k.Owner = d.owner()
	k.Error, k.Failure = d.str(), ledger.Failure(d.str())
	ref := d.str()
	k.Attempt = d.int()
	var flags byte
	if f := d.bytes(1); d.err == nil {
		flags = f[0]
		if flags&^keyRecFlags != 0 {
			d.err = fmt.Errorf("%w: key record %s: unknown flags %#x", ledger.ErrFormat, key, flags)
		}
	}
	k.Retryable, k.MaybeTookEffect = flags&keyRecRetryable != 0, flags&keyRecMaybeTookEffect != 0
	k.ClaimedAt = d.time()
	switch {
	case flags&keyRecUpdatedDelta == 0:
		k.UpdatedAt = d.time()
	case d.err == nil && k.ClaimedAt.IsZero():
		d.err = fmt.Errorf("%w: key record %s: updated_at relative to no claimed_at", ledger.ErrFormat, key)
	default:
		if v := d.varint(); d.err == nil {
			k.UpdatedAt = time.Unix(0, k.ClaimedAt.UnixNano()+v).UTC()
		}
	}
	if flags&keyRecFirstIsClaimed != 0 {
		k.FirstClaimedAt = k.ClaimedAt
	} else {
		k.FirstClaimedAt = d.time()
	}
	k.Args = d.raw()
	if d.err != nil {
		return k, fmt.Errorf("key record %s: %w", key, d.err)
	}
	if len(d.b) != 0 {
		return k, fmt.Errorf("%w: key record %s: %d bytes after its fields", ledger.ErrFormat, key, len(d.b))
	}
	if ref != "" {
		if !validHash(ref) || k.Args != nil {
			return k, fmt.Errorf("%w: key record %s names a malformed args blob", ledger.ErrFormat, key)
		}
		k.Args = refOf(ref)
	}
	if out := b[w+int(n):]; len(out) > 0 {
		k.Output = json.RawMessage(append([]byte(nil), out...))
	}
	return k, nil
}

// keyRecOutput returns a key record's output without decoding its fields.
func keyRecOutput(b []byte) (json.RawMessage, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, fmt.Errorf("%w: key record: corrupt header", ledger.ErrFormat)
	}
	out := b[w+int(n):]
	if len(out) == 0 {
		return nil, nil
	}
	return json.RawMessage(append([]byte(nil), out...)), nil
}

// appendTime appends t: 0 for the zero time, else 1 and a varint of its
// Unix nanoseconds (read back in UTC).
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	return binary.AppendVarint(append(b, 1), t.UnixNano())
}

func (d *rowReader) time() time.Time {
	switch present := d.bytes(1); {
	case d.err != nil:
		return time.Time{}
	case present[0] == 0:
		return time.Time{}
	case present[0] != 1:
		d.err = fmt.Errorf("%w: unknown time form %d", ledger.ErrFormat, present[0])
		return time.Time{}
	}
	v := d.varint()
	if d.err != nil {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

func (d *rowReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = cmp.Or(d.err, fmt.Errorf("%w: truncated record", ledger.ErrFormat))
		return 0
	}
	d.b = d.b[n:]
	return v
}
