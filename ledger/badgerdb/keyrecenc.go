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
// decode as they did. Since encKeyRec2 (below) it is only read.
const encKeyRec = 7

// encKeyRec2 is the key record as written now, framed like encKeyRec. It
// holds nothing its Badger key or the row already holds:
//
//	fields: action id, tool (uvarint length + bytes), state (one byte, a
//	code of statusCodes; 0: a string follows), owner (appendOwner), error,
//	failure, args_ref (strings), attempt (uvarint), flags (one byte: 1 retryable,
//	2 maybe_took_effect, 4 first_claimed_at equals claimed_at, 8 the args
//	are the row's, 16 updated_at is given relative to claimed_at),
//	claimed_at (as in encKeyRec), updated_at (a varint of nanoseconds after
//	claimed_at with flag 16, else as claimed_at), first_claimed_at (absent
//	with flag 4), then the args: with flag 8 the revision whose row holds
//	them (uvarint; the row's key is this key and its args are the bytes
//	the key was derived from: argsFromRow), else as in encKeyRec.
//
// The key and the run id are those of the record's Badger key
// (x\0<run>\0<key>), given to the decoder.
const encKeyRec2 = 8

const (
	keyRecRetryable = 1 << iota
	keyRecMaybeTookEffect
	keyRecFirstIsClaimed
	keyRecArgsInRow
	keyRecUpdatedDelta
)

// statusCodes are the one-byte codes of the action statuses in encKeyRec2
// and encRow2 records (never renumbered: records on disk hold them).
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

// encodeKeyRec2 encodes k as an encKeyRec2 record; argsRev > 0 leaves the
// args out: they are the row's of that revision.
func encodeKeyRec2(k ledger.KeyRecord, argsRev int) []byte {
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
	flags := outcomeFlags(k)
	if k.FirstClaimedAt.Equal(k.ClaimedAt) && k.FirstClaimedAt.IsZero() == k.ClaimedAt.IsZero() {
		flags |= keyRecFirstIsClaimed
	}
	if argsRev > 0 && ref == "" {
		flags |= keyRecArgsInRow
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
	switch {
	case flags&keyRecArgsInRow != 0:
		m = binary.AppendUvarint(m, uint64(argsRev))
	case args == nil:
		m = append(m, 0)
	default:
		m = binary.AppendUvarint(m, uint64(len(args))+1)
		m = append(m, args...)
	}
	return frameKeyRec(encKeyRec2, m, k.Output)
}

// decodeKeyRec2 decodes an encKeyRec2 record of (runID, key). argsRev > 0:
// the args are not in the record but in the row of that revision
// (argsFromRow); args held in a blob come back as a reference.
func decodeKeyRec2(runID, key string, b []byte) (k ledger.KeyRecord, argsRev int, err error) {
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || uint64(len(b)-1-w) < n {
		return k, 0, fmt.Errorf("%w: corrupt key record header", ledger.ErrFormat)
	}
	k.Key, k.RunID = key, runID
	d := rowReader{b: b[1+w : 1+w+int(n)]}
	k.ActionID, k.Tool = d.str(), d.str()
	k.State = d.status()
	k.Owner = d.owner()
	k.Error, k.Failure = d.str(), ledger.Failure(d.str())
	ref := d.str()
	k.Attempt = int(d.uvarint())
	var flags byte
	if f := d.bytes(1); d.err == nil {
		flags = f[0]
	}
	k.Retryable, k.MaybeTookEffect = flags&keyRecRetryable != 0, flags&keyRecMaybeTookEffect != 0
	k.ClaimedAt = d.time()
	if flags&keyRecUpdatedDelta != 0 {
		if v, n := binary.Varint(d.b); n <= 0 {
			d.err = cmp.Or(d.err, fmt.Errorf("%w: truncated key record", ledger.ErrFormat))
		} else {
			d.b = d.b[n:]
			k.UpdatedAt = time.Unix(0, k.ClaimedAt.UnixNano()+v).UTC()
		}
	} else {
		k.UpdatedAt = d.time()
	}
	if flags&keyRecFirstIsClaimed != 0 {
		k.FirstClaimedAt = k.ClaimedAt
	} else {
		k.FirstClaimedAt = d.time()
	}
	if flags&keyRecArgsInRow != 0 {
		argsRev = int(d.uvarint())
		if d.err == nil && argsRev <= 0 {
			d.err = fmt.Errorf("%w: key record %s: args in revision 0", ledger.ErrFormat, key)
		}
	} else {
		k.Args = d.raw()
	}
	if d.err != nil {
		return k, 0, d.err
	}
	if len(d.b) != 0 {
		return k, 0, fmt.Errorf("%w: key record %s: %d bytes after its fields", ledger.ErrFormat, key, len(d.b))
	}
	if ref != "" {
		if !validHash(ref) {
			return k, 0, fmt.Errorf("%w: key record names a malformed args blob", ledger.ErrFormat)
		}
		k.Args = refOf(ref)
	}
	if out := b[1+w+int(n):]; len(out) > 0 {
		k.Output = json.RawMessage(append([]byte(nil), out...))
	}
	return k, argsRev, nil
}

// outcomeFlags are the flag bits both key-record encodings share.
func outcomeFlags(k ledger.KeyRecord) byte {
	var flags byte
	if k.Retryable {
		flags |= keyRecRetryable
	}
	if k.MaybeTookEffect {
		flags |= keyRecMaybeTookEffect
	}
	return flags
}

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
	flags := outcomeFlags(k)
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
	return frameKeyRec(encKeyRec, m, k.Output)
}

// frameKeyRec is a key record as stored: its tag, the length of its
// metadata m, m, then the output as it is.
func frameKeyRec(tag byte, m, output []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(m)+len(output))
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(m)))
	b = append(b, m...)
	return append(b, output...)
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
