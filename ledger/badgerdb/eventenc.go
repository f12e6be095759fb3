package badgerdb

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docketrun/docket/ledger"
)

// An event (e\0<run>\0<seq BE8>) holds nothing its Badger key holds (the
// run id and seq), names its type by a one-byte code, and stores the data
// of the commonest shapes without their JSON framing:
//
//	at (varint, Unix nanoseconds, UTC), type (one byte, a code of
//	eventCodes; 0: uvarint length + bytes follow), action id (uvarint
//	length + bytes), hash (one byte, hashNone, hashSHA256 and its 32
//	bytes, or hashString, a uvarint length and bytes), then the data: a
//	form byte (dataNone...) and its fields, the last one to the end.
//
// The data read back is byte for byte the data written (the audit chain
// hashes it): a shape is used only when rebuilding it gives the same
// bytes, else the data is stored as it is (dataRaw). The audit hash is
// stored whole, so each event is checked on its own.
// eventCodes are the one-byte codes of event types in event records
// (never renumbered: records on disk hold them). A type without a code is
// stored by name.
var eventCodes = []ledger.EventType{1: ledger.EventRunCreated, 2: ledger.EventPlanRecorded, 3: ledger.EventRunReplayed,
	4: ledger.EventRunToolsChanged, 5: ledger.EventRunAwaitingApproval, 6: ledger.EventRunPaused, 7: ledger.EventRunResumed,
	8: ledger.EventRunCompleted, 9: ledger.EventRunFailed, 10: ledger.EventRunCancelled, 11: ledger.EventActionApproved,
	12: ledger.EventActionRejected, 13: ledger.EventActionEdited, 14: ledger.EventActionClaimed, 15: ledger.EventActionSucceeded,
	16: ledger.EventActionAttemptFailed, 17: ledger.EventActionFailed, 18: ledger.EventActionNeedsReview,
	19: ledger.EventActionResolved, 20: ledger.EventActionSkipped, 21: ledger.EventActionCompensated,
	22: ledger.EventLookupWait, 23: ledger.EventActionPolicy, 24: ledger.EventActionApprovalAdded}

var eventCodeOf = func() map[ledger.EventType]byte {
	m := make(map[ledger.EventType]byte, len(eventCodes))
	for c, t := range eventCodes {
		if c > 0 {
			m[t] = byte(c)
		}
	}
	return m
}()

// The data forms of an event record.
const (
	dataNone   = 0 // no data
	dataRaw    = 1 // the data's bytes, to the end
	dataOutput = 2 // {"output":X}: X's bytes, to the end
	// {"attempt":N,"key":K<rest>} (action.claimed): uvarint N, K (appendKey),
	// then the rest of the object's text (",..." or nothing), to the end
	dataClaim = 3
	dataBy    = 4 // {"by":S}: S's text (uvarint length + bytes)
)

// The forms of an event's audit hash.
const (
	hashNone   = 0 // no hash (a run without an audit chain)
	hashSHA256 = 1 // "sha256:" + 64 lowercase hex digits: the 32 bytes
	hashString = 2 // any other: uvarint length + bytes
)

const sha256Prefix = "sha256:"

// encodeEvent encodes an event record (its Badger key holds its run id
// and seq).
func encodeEvent(e ledger.Event) []byte {
	b := make([]byte, 0, 24+len(e.ActionID)+33+len(e.Data))
	b = binary.AppendVarint(b, e.At.UnixNano())
	if c, ok := eventCodeOf[e.Type]; ok {
		b = append(b, c)
	} else {
		b = appendStr(append(b, 0), string(e.Type))
	}
	b = appendStr(b, e.ActionID)
	b = appendHash(b, e.Hash)
	return appendData(b, e.Data)
}

func appendHash(b []byte, h string) []byte {
	switch raw, ok := sha256Hash(h); {
	case h == "":
		return append(b, hashNone)
	case ok:
		return append(append(b, hashSHA256), raw...)
	default:
		return appendStr(append(b, hashString), h)
	}
}

// appendData appends data in the first form of dataForms that gives its
// bytes back exactly.
func appendData(b []byte, data json.RawMessage) []byte {
	if len(data) == 0 {
		return append(b, dataNone)
	}
	if x, ok := bytes.CutPrefix(data, []byte(`{"output":`)); ok && bytes.HasSuffix(x, []byte("}")) {
		x = x[:len(x)-1]
		if json.Valid(x) {
			return append(append(b, dataOutput), x...)
		}
	}
	if v, ok := bytes.CutPrefix(data, []byte(`{"by":`)); ok && bytes.HasSuffix(v, []byte("}")) {
		var by string
		if json.Unmarshal(v[:len(v)-1], &by) == nil && bytes.Equal(byData(by), data) {
			return appendStr(append(b, dataBy), by)
		}
	}
	if n, key, rest, ok := cutClaim(data); ok {
		b = binary.AppendUvarint(append(b, dataClaim), n)
		return append(appendKey(b, key), rest...)
	}
	return append(append(b, dataRaw), data...)
}

func byData(by string) []byte {
	s, _ := json.Marshal(by)
	return append(append([]byte(`{"by":`), s...), '}')
}

// claimData is the data of action.claimed: {"attempt":N,"key":K<rest>}.
func claimData(n uint64, key string, rest []byte) []byte {
	k, _ := json.Marshal(key)
	b := strconv.AppendUint(make([]byte, 0, 32+len(k)+len(rest)), n, 10)
	b = append(append([]byte(`{"attempt":`), b...), `,"key":`...)
	b = append(append(b, k...), rest...)
	return append(b, '}')
}

// cutClaim splits data of the claimData shape into its parts.
func cutClaim(data []byte) (n uint64, key string, rest []byte, ok bool) {
	v, ok := bytes.CutPrefix(data, []byte(`{"attempt":`))
	if !ok {
		return 0, "", nil, false
	}
	i := bytes.IndexByte(v, ',')
	if i <= 0 {
		return 0, "", nil, false
	}
	n, err := strconv.ParseUint(string(v[:i]), 10, 64)
	if err != nil {
		return 0, "", nil, false
	}
	v, ok = bytes.CutPrefix(v[i:], []byte(`,"key":"`))
	if !ok {
		return 0, "", nil, false
	}
	j := bytes.IndexByte(v, '"')
	if j < 0 || len(v) < j+2 {
		return 0, "", nil, false
	}
	key, rest = string(v[:j]), v[j+1:len(v)-1]
	if !bytes.Equal(claimData(n, key, rest), data) {
		return 0, "", nil, false
	}
	return n, key, rest, true
}

// Keys derived by the executor ("dk1_" + 64 lowercase hex digits) are stored
// as their 32 bytes; any other key as its text.
const (
	keyText = 0 // uvarint length + bytes
	keyDK1  = 1 // 32 bytes: "dk1_" + their lowercase hex
)

const dk1Prefix = "dk1_"

func appendKey(b []byte, key string) []byte {
	if raw, ok := dk1Bytes(key); ok {
		return append(append(b, keyDK1), raw...)
	}
	return appendStr(append(b, keyText), key)
}

// dk1Bytes returns the 32 bytes of an executor-derived key.
func dk1Bytes(key string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(key, dk1Prefix)
	if !ok || len(rest) != 64 || strings.ToLower(rest) != rest {
		return nil, false
	}
	raw, err := hex.DecodeString(rest)
	return raw, err == nil
}

func (d *rowReader) key() string {
	form := d.bytes(1)
	switch {
	case d.err != nil:
		return ""
	case form[0] == keyText:
		return d.str()
	case form[0] == keyDK1:
		if raw := d.bytes(32); d.err == nil {
			return dk1Prefix + hex.EncodeToString(raw)
		}
		return ""
	}
	d.err = fmt.Errorf("%w: unknown key form %d", ledger.ErrFormat, form[0])
	return ""
}

// sha256Hash returns the 32 bytes of a "sha256:<64 lowercase hex>" hash.
func sha256Hash(h string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(h, sha256Prefix)
	if !ok || len(rest) != 64 || strings.ToLower(rest) != rest {
		return nil, false
	}
	raw, err := hex.DecodeString(rest)
	return raw, err == nil
}

// decodeEvent decodes the event record of (runID, seq).
func decodeEvent(runID string, seq uint64, b []byte) (ledger.Event, error) {
	d := rowReader{b: b}
	e := ledger.Event{Seq: seq, RunID: runID}
	if at := d.varint(); d.err == nil {
		e.At = time.Unix(0, at).UTC()
	}
	var err error
	if e.Type, err = d.eventType(seq); err != nil {
		return e, err
	}
	e.ActionID = d.str()
	e.Hash = d.eventHash(seq)
	form := d.bytes(1)
	if d.err != nil {
		return e, fmt.Errorf("event %d: %w", seq, d.err)
	}
	if e.Data, err = d.eventData(seq, form[0]); err != nil {
		return e, err
	}
	if d.err != nil {
		return e, fmt.Errorf("event %d: %w", seq, d.err)
	}
	return e, nil
}

// eventType reads an event's type: a code, or 0 and the type's text.
func (d *rowReader) eventType(seq uint64) (ledger.EventType, error) {
	switch c := d.bytes(1); {
	case d.err != nil:
	case c[0] == 0:
		return ledger.EventType(d.str()), nil
	case int(c[0]) < len(eventCodes):
		return eventCodes[c[0]], nil
	default:
		return "", fmt.Errorf("%w: event %d: unknown type code %d", ledger.ErrFormat, seq, c[0])
	}
	return "", nil
}

// eventHash reads an event's chain hash ("": none).
func (d *rowReader) eventHash(seq uint64) string {
	switch form := d.bytes(1); {
	case d.err != nil:
	case form[0] == hashNone:
	case form[0] == hashSHA256:
		if raw := d.bytes(32); d.err == nil {
			return sha256Prefix + hex.EncodeToString(raw)
		}
	case form[0] == hashString:
		return d.str()
	default:
		d.err = fmt.Errorf("%w: event %d: unknown hash form %d", ledger.ErrFormat, seq, form[0])
	}
	return ""
}

// eventData reads the rest of an event record, its data in form.
func (d *rowReader) eventData(seq uint64, form byte) (json.RawMessage, error) {
	switch form {
	case dataNone:
		if len(d.b) > 0 {
			return nil, fmt.Errorf("%w: event %d: bytes after an event without data", ledger.ErrFormat, seq)
		}
		return nil, nil
	case dataRaw, dataOutput:
		if len(d.b) == 0 {
			return nil, fmt.Errorf("%w: event %d: truncated data", ledger.ErrFormat, seq)
		}
		if form == dataRaw {
			return append([]byte(nil), d.b...), nil
		}
		return append(append(append(make([]byte, 0, len(d.b)+11), `{"output":`...), d.b...), '}'), nil
	case dataBy:
		by := d.str()
		if len(d.b) > 0 && d.err == nil {
			d.err = fmt.Errorf("%w: event %d: bytes after its data", ledger.ErrFormat, seq)
		}
		return byData(by), nil
	case dataClaim:
		n := d.uvarint()
		key := d.key()
		return claimData(n, key, d.b), nil
	}
	return nil, fmt.Errorf("%w: event %d: unknown data form %d", ledger.ErrFormat, seq, form)
}
