package badgerdb

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/docketrun/docket/ledger"
)

// Key layout (see doc.go). Every key starts with a one-byte kind and a NUL;
// per-run kinds continue with the run id and a NUL, so one run's records of a
// kind are one contiguous prefix.
const (
	kindMeta   = 'v' // v\0format                      -> format version
	kindRun    = 'h' // h\0<run>                       -> run header
	kindIndex  = 't' // t\0<^created BE8><run>         -> run status (ListRuns, newest first)
	kindPlan   = 'p' // p\0<run>\0<rev BE4>            -> plan JSON (immutable)
	kindRow    = 'a' // a\0<run>\0<rev BE4><action id> -> row (once changed)
	kindRows   = 'b' // b\0<run>\0<rev BE4>            -> the revision's initial rows
	kindKeyRec = 'x' // x\0<run>\0<key>                -> key record
	kindKeyIdx = 'k' // k\0<key>                       -> run id
	kindEvent  = 'e' // e\0<run>\0<seq BE8>            -> event
	kindMemo   = 'm' // m\0<run>\0<name>               -> memo value
	kindBlob   = 'c' // c\0<run>\0<sha256 hex>         -> a large value, stored once (large.go)
	kindEnded  = 'g' // g\0<ended BE8><run>           -> empty: ended runs by end time (collect.go)
)

// formatVersion is the on-disk format of a data directory: its Badger keys
// (above, with an executor-derived idempotency key as NUL + its 32 bytes:
// appendKeyName) and one encoding per record kind (rowenc.go, keyrecenc.go,
// eventenc.go, large.go; run headers, budgets and holds are JSON). Open
// refuses a directory of any other format (checkFormat): the formats
// before "3" were written only by development builds, and this build has
// no reader for them.
const formatVersion = "3"

var metaFormatKey = []byte{kindMeta, 0, 'f', 'o', 'r', 'm', 'a', 't'}

func simpleKey(kind byte, id string) []byte {
	b := make([]byte, 0, 2+len(id))
	b = append(b, kind, 0)
	return append(b, id...)
}

func runPrefix(kind byte, runID string) []byte {
	b := make([]byte, 0, 3+len(runID)+16)
	b = append(b, kind, 0)
	b = append(b, runID...)
	return append(b, 0)
}

func runKey(runID string) []byte { return simpleKey(kindRun, runID) }

func indexKey(created int64, runID string) []byte {
	b := make([]byte, 0, 10+len(runID))
	b = append(b, kindIndex, 0)
	b = binary.BigEndian.AppendUint64(b, ^uint64(created))
	return append(b, runID...)
}

func planKey(runID string, rev int) []byte {
	return binary.BigEndian.AppendUint32(runPrefix(kindPlan, runID), uint32(rev))
}

func rowPrefix(runID string, rev int) []byte {
	return binary.BigEndian.AppendUint32(runPrefix(kindRow, runID), uint32(rev))
}

func rowsBlobKey(runID string, rev int) []byte {
	return binary.BigEndian.AppendUint32(runPrefix(kindRows, runID), uint32(rev))
}

func rowKey(runID string, rev int, actionID string) []byte {
	return append(rowPrefix(runID, rev), actionID...)
}

// keyRecKey is the Badger key of (runID, key)'s key record.
func keyRecKey(runID, key string) []byte { return appendKeyName(runPrefix(kindKeyRec, runID), key) }

// keyIdxKey is the Badger key of key's index entry (-> run id).
func keyIdxKey(key string) []byte { return appendKeyName([]byte{kindKeyIdx, 0}, key) }

// appendKeyName appends an idempotency key as Badger keys hold it: an
// executor-derived key ("dk1_" + 64 lowercase hex digits) as NUL and its 32
// bytes, any other key as its text (which never holds a NUL: ledger ids).
func appendKeyName(b []byte, key string) []byte {
	if raw, ok := dk1Bytes(key); ok {
		return append(append(b, 0), raw...)
	}
	return append(b, key...)
}

// keyFromName reads a key back from the end of a Badger key.
func keyFromName(b []byte) string {
	if len(b) == 33 && b[0] == 0 {
		return dk1Prefix + hex.EncodeToString(b[1:])
	}
	return string(b)
}

func eventKey(runID string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(runPrefix(kindEvent, runID), seq)
}

func memoKey(runID, name string) []byte { return append(runPrefix(kindMemo, runID), name...) }

func blobKey(runID, hash string) []byte { return append(runPrefix(kindBlob, runID), hash...) }

// A run header (h\0<run>) is the JSON of its ledger.RunRecord.
func encodeRun(r ledger.RunRecord) ([]byte, error) { return json.Marshal(r) }

func decodeRun(b []byte) (ledger.RunRecord, error) {
	var r ledger.RunRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: run header: %v", ledger.ErrFormat, err)
	}
	return r, nil
}
