package ledger

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
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

// formatVersion is the on-disk format this code writes and reads.
const formatVersion = "1"

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

func keyRecKey(runID, key string) []byte { return append(runPrefix(kindKeyRec, runID), key...) }

func keyIdxKey(key string) []byte { return simpleKey(kindKeyIdx, key) }

func eventKey(runID string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(runPrefix(kindEvent, runID), seq)
}

func memoKey(runID, name string) []byte { return append(runPrefix(kindMemo, runID), name...) }

func blobKey(runID, hash string) []byte { return append(runPrefix(kindBlob, runID), hash...) }

// validID checks a run id, action id, key or memo name: non-empty, at most
// 512 bytes, no NUL (NUL separates key components).
func validID(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(s) > 512 {
		return fmt.Errorf("%w: %s longer than 512 bytes", ErrInvalid, what)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s contains NUL", ErrInvalid, what)
	}
	return nil
}

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
		return nil, fmt.Errorf("%w: unknown record encoding", ErrFormat)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return nil, fmt.Errorf("%w: corrupt record header", ErrFormat)
	}
	start := 1 + k
	if err := json.Unmarshal(b[start:start+int(n)], meta); err != nil {
		return nil, fmt.Errorf("decoding record: %w", err)
	}
	return b[start+int(n):], nil
}

// storedRun is the run header as stored.
type storedRun struct {
	Run
	Rows    int    `json:"rows"`               // rows of the current revision (next row order)
	RevHash string `json:"rev_hash,omitempty"` // plan hash of the current revision
}

// storedRow is a row as stored. Output is not stored here: it lives in the
// key record (Actions joins them), so an output is written once.
type storedRow struct {
	ID           string          `json:"id"`
	Tool         string          `json:"tool"`
	Class        string          `json:"class,omitempty"`
	Key          string          `json:"key,omitempty"`
	Status       Status          `json:"status"`
	Attempts     int             `json:"attempts,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
	DependsOn    []string        `json:"depends_on,omitempty"`
	Error        string          `json:"error,omitempty"`
	ApprovedArgs json.RawMessage `json:"approved_args,omitempty"`
	Undo         bool            `json:"undo,omitempty"`
	Ord          int             `json:"ord"`
}

func (r storedRow) action(runID string) Action {
	return Action{RunID: runID, ID: r.ID, Tool: r.Tool, Class: r.Class, Key: r.Key, Status: r.Status,
		Attempts: r.Attempts, Args: r.Args, DependsOn: r.DependsOn, Error: r.Error,
		ApprovedArgs: r.ApprovedArgs, Undo: r.Undo}
}

func rowFromAction(a Action, ord int) storedRow {
	return storedRow{ID: a.ID, Tool: a.Tool, Class: a.Class, Key: a.Key, Status: a.Status,
		Attempts: a.Attempts, Args: a.Args, DependsOn: a.DependsOn, Error: a.Error,
		ApprovedArgs: a.ApprovedArgs, Undo: a.Undo, Ord: ord}
}

// storedKeyRec is a key record's metadata as stored. Args of largeValue
// bytes or more are not copied into it: ArgsRef names the content blob that
// holds them (shared with the row and the plan, large.go) and "args" is null.
// Records written before ArgsRef existed carry their args inline and read
// the same way.
type storedKeyRec struct {
	KeyRecord
	Args    json.RawMessage `json:"args"` // shadows KeyRecord.Args
	ArgsRef string          `json:"args_ref,omitempty"`
}

func encodeKeyRec(k KeyRecord) ([]byte, error) {
	s := storedKeyRec{KeyRecord: k, Args: k.Args}
	s.KeyRecord.Output, s.KeyRecord.Args = nil, nil
	if h, ok := refHash(k.Args); ok {
		s.Args, s.ArgsRef = nil, h
	}
	return encode(s, k.Output)
}

// decodeKeyRec decodes a key record; args held in a blob come back as a
// reference (large.go), which the readers resolve.
func decodeKeyRec(b []byte) (KeyRecord, error) {
	var s storedKeyRec
	blob, err := decode(b, &s)
	k := s.KeyRecord
	if err != nil {
		return k, err
	}
	k.Args = s.Args
	if s.ArgsRef != "" {
		if !validHash(s.ArgsRef) {
			return k, fmt.Errorf("%w: key record names a malformed args blob", ErrFormat)
		}
		k.Args = refOf(s.ArgsRef)
	}
	if len(blob) > 0 {
		k.Output = json.RawMessage(blob)
	}
	return k, nil
}

func encodeEvent(e Event) ([]byte, error) {
	data := e.Data
	e.Data = nil
	return encode(e, data)
}

func decodeEvent(b []byte) (Event, error) {
	var e Event
	blob, err := decode(b, &e)
	if err != nil {
		return e, err
	}
	if len(blob) > 0 {
		e.Data = json.RawMessage(blob)
	}
	return e, nil
}
