package badgerdb

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

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
)

// formatVersion is the on-disk format of the directories this code
// creates. Format "2" writes an executor-derived key ("dk1_" + 64 lowercase
// hex digits) in Badger keys as a NUL and its 32 bytes (x and k records:
// compactKeys); format "1" (formatTextKeys), the directories created before
// it, writes every key as its text, and is still read and written as it is
// (its records take the newer value encodings, which are read by their tag
// byte). A build that knows only format "1" refuses a format "2" directory
// (it would not find its keys).
const formatVersion = "2"

// formatTextKeys is the format of directories whose Badger keys hold every
// idempotency key as its text.
const formatTextKeys = "1"

// knownFormat reports whether this build reads and writes format v.
func knownFormat(v string) bool { return v == formatVersion || v == formatTextKeys }

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

// keyRecKey and keyIdxKey are the key record's and key index's Badger keys
// with the key as its text (format "1").
func keyRecKey(runID, key string) []byte { return append(runPrefix(kindKeyRec, runID), key...) }

func keyIdxKey(key string) []byte { return simpleKey(kindKeyIdx, key) }

// keyNames says how idempotency keys are written in a directory's Badger
// keys: compact (format "2") or as their text (format "1").
type keyNames struct{ compact bool }

func (n keyNames) appendKey(b []byte, key string) []byte {
	if n.compact {
		if rest, ok := strings.CutPrefix(key, dk1Prefix); ok && len(rest) == 64 && strings.ToLower(rest) == rest {
			if raw, err := hex.DecodeString(rest); err == nil {
				return append(append(b, 0), raw...)
			}
		}
	}
	return append(b, key...)
}

// rec is the Badger key of (runID, key)'s key record.
func (n keyNames) rec(runID, key string) []byte {
	return n.appendKey(runPrefix(kindKeyRec, runID), key)
}

// idx is the Badger key of key's index entry (-> run id).
func (n keyNames) idx(key string) []byte { return n.appendKey([]byte{kindKeyIdx, 0}, key) }

// key reads a key back from the end of a Badger key. A key's text never
// holds a NUL (ledger ids), so a NUL starts the compact form.
func (n keyNames) key(b []byte) string {
	if n.compact && len(b) == 33 && b[0] == 0 {
		return dk1Prefix + hex.EncodeToString(b[1:])
	}
	return string(b)
}

func eventKey(runID string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(runPrefix(kindEvent, runID), seq)
}

func memoKey(runID, name string) []byte { return append(runPrefix(kindMemo, runID), name...) }

func blobKey(runID, hash string) []byte { return append(runPrefix(kindBlob, runID), hash...) }

// Records are stored as: a one-byte encoding tag, a uvarint length, that many
// bytes of JSON metadata, then a raw JSON blob (a key record's output, an
// event's data) kept out of the metadata so that reading it never re-parses
// large outputs.
const encJSONBlob = 1

func encode(meta any, blob []byte) ([]byte, error) {
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(m)+len(blob))
	b = append(b, encJSONBlob)
	b = binary.AppendUvarint(b, uint64(len(m)))
	b = append(b, m...)
	return append(b, blob...), nil
}

// decode unmarshals the metadata into meta and returns the blob (aliasing b).
func decode(b []byte, meta any) (blob []byte, err error) {
	if len(b) < 2 || b[0] != encJSONBlob {
		return nil, fmt.Errorf("%w: unknown record encoding", ledger.ErrFormat)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return nil, fmt.Errorf("%w: corrupt record header", ledger.ErrFormat)
	}
	start := 1 + k
	if err := json.Unmarshal(b[start:start+int(n)], meta); err != nil {
		return nil, fmt.Errorf("decoding record: %w", err)
	}
	return b[start+int(n):], nil
}

// storedKeyRec is a key record's metadata as stored. Args of largeValue
// bytes or more are not copied into it: ArgsRef names the content blob that
// holds them (shared with the row and the plan, large.go) and "args" is null.
// Records written before ArgsRef existed carry their args inline and read
// the same way.
type storedKeyRec struct {
	ledger.KeyRecord
	Args    json.RawMessage `json:"args"` // shadows KeyRecord.Args
	ArgsRef string          `json:"args_ref,omitempty"`
}

// decodeKeyRec decodes the key record of (runID, key) in any of its
// encodings. argsRev > 0: the args are those of the row of that revision
// (argsFromRow); args held in a blob come back as a reference (large.go),
// which the readers resolve.
func decodeKeyRec(runID, key string, b []byte) (rec ledger.KeyRecord, argsRev int, err error) {
	if len(b) > 0 && b[0] == encKeyRec2 {
		return decodeKeyRec2(runID, key, b)
	}
	rec, err = decodeKeyRec1(b)
	if err == nil && (rec.Key != key || rec.RunID != runID) {
		err = fmt.Errorf("%w: the key record of %s names key %s of run %q", ledger.ErrFormat, key, rec.Key, rec.RunID)
	}
	return rec, 0, err
}

// decodeKeyRec1 decodes a key record of the encodings before encKeyRec2.
func decodeKeyRec1(b []byte) (ledger.KeyRecord, error) {
	if len(b) > 0 && b[0] == encKeyRec {
		return decodeKeyRecBinary(b)
	}
	var s storedKeyRec
	blob, err := decode(b, &s)
	k := s.KeyRecord
	if err != nil {
		return k, err
	}
	k.Args = s.Args
	if s.ArgsRef != "" {
		if !validHash(s.ArgsRef) {
			return k, fmt.Errorf("%w: key record names a malformed args blob", ledger.ErrFormat)
		}
		k.Args = refOf(s.ArgsRef)
	}
	if len(blob) > 0 {
		k.Output = json.RawMessage(blob)
	}
	return k, nil
}
