package badgerdb

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/docketrun/docket/ledger"
)

// Rows are the most numerous records a resume reads, so they have a compact
// binary encoding instead of JSON metadata (JSON decoding dominated the cost
// of loading a 10,000-action run):
//
//	row:  encRow,  then the row's fields
//	blob: encRows, uvarint count, then each row's fields
//
// Fields, in order: id, tool, class, key, status (uvarint length + bytes),
// attempts (uvarint), args (uvarint length+1, 0 = null), depends_on (uvarint
// count, then strings), error (string), approved_args (like args), undo (one
// byte), ord (uvarint); in the extended encodings (encRowX, encRowsX, used
// only when a row has a policy gate or approvals) then a JSON object
// {"gate","approvals"} (like args). Records written before the extension
// decode as before.
const (
	encRow   = 2
	encRows  = 3
	encRowX  = 4
	encRowsX = 5
)

// rowExt holds the fields of the extended row encoding.
type rowExt struct {
	Gate      *ledger.Gate      `json:"gate,omitempty"`
	Approvals []ledger.Approval `json:"approvals,omitempty"`
}

func extended(r ledger.RowRecord) bool { return r.Gate != nil || len(r.Approvals) > 0 }

func appendExt(b []byte, r ledger.RowRecord) []byte {
	if !extended(r) {
		return appendRaw(b, nil)
	}
	ext, err := json.Marshal(rowExt{Gate: r.Gate, Approvals: r.Approvals})
	if err != nil {
		panic(fmt.Sprintf("badgerdb: encoding a row's gate: %v", err)) // plain data: cannot fail
	}
	return appendRaw(b, ext)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendRaw(b []byte, r json.RawMessage) []byte {
	if r == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r))+1)
	return append(b, r...)
}

func appendRow(b []byte, r ledger.RowRecord) []byte {
	b = appendStr(b, r.ID)
	b = appendStr(b, r.Tool)
	b = appendStr(b, r.Class)
	b = appendStr(b, r.Key)
	b = appendStr(b, string(r.Status))
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = appendRaw(b, r.Args)
	b = binary.AppendUvarint(b, uint64(len(r.DependsOn)))
	for _, d := range r.DependsOn {
		b = appendStr(b, d)
	}
	b = appendStr(b, r.Error)
	b = appendRaw(b, r.ApprovedArgs)
	undo := byte(0)
	if r.Undo {
		undo = 1
	}
	b = append(b, undo)
	return binary.AppendUvarint(b, uint64(r.Ord))
}

func encodeRow(r ledger.RowRecord) []byte {
	if extended(r) {
		return appendExt(appendRow(append(make([]byte, 0, 128+len(r.Args)+len(r.ApprovedArgs)), encRowX), r), r)
	}
	return appendRow(append(make([]byte, 0, 64+len(r.Args)+len(r.ApprovedArgs)), encRow), r)
}

func encodeRows(rows []ledger.RowRecord) []byte {
	tag := byte(encRows)
	for _, r := range rows {
		if extended(r) {
			tag = encRowsX
			break
		}
	}
	b := binary.AppendUvarint([]byte{tag}, uint64(len(rows)))
	for _, r := range rows {
		b = appendRow(b, r)
		if tag == encRowsX {
			b = appendExt(b, r)
		}
	}
	return b
}

// rowReader decodes the binary row encoding; the first error sticks. Decoded
// strings and raw JSON are copies (the input may be Badger's buffer).
type rowReader struct {
	b   []byte
	err error
}

func (d *rowReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: truncated row record", ledger.ErrFormat)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *rowReader) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = fmt.Errorf("%w: truncated row record", ledger.ErrFormat)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *rowReader) str() string { return string(d.bytes(d.uvarint())) }

func (d *rowReader) raw() json.RawMessage {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	return json.RawMessage(append([]byte(nil), d.bytes(n-1)...))
}

func (d *rowReader) row() ledger.RowRecord {
	var r ledger.RowRecord
	r.ID = d.str()
	r.Tool = d.str()
	r.Class = d.str()
	r.Key = d.str()
	r.Status = ledger.Status(d.str())
	r.Attempts = int(d.uvarint())
	r.Args = d.raw()
	if n := d.uvarint(); n > 0 && d.err == nil {
		if n > uint64(len(d.b)) {
			d.err = fmt.Errorf("%w: truncated row record", ledger.ErrFormat)
			return r
		}
		r.DependsOn = make([]string, n)
		for i := range r.DependsOn {
			r.DependsOn[i] = d.str()
		}
	}
	r.Error = d.str()
	r.ApprovedArgs = d.raw()
	if u := d.bytes(1); len(u) == 1 {
		r.Undo = u[0] == 1
	}
	r.Ord = int(d.uvarint())
	return r
}

// ext decodes the extension of a row of the extended encodings.
func (d *rowReader) ext(r *ledger.RowRecord) {
	raw := d.raw()
	if raw == nil || d.err != nil {
		return
	}
	var e rowExt
	if err := json.Unmarshal(raw, &e); err != nil {
		d.err = fmt.Errorf("%w: row %s: gate: %v", ledger.ErrFormat, r.ID, err)
		return
	}
	r.Gate, r.Approvals = e.Gate, e.Approvals
}

func decodeRow(b []byte) (ledger.RowRecord, error) {
	if len(b) == 0 || (b[0] != encRow && b[0] != encRowX) {
		return ledger.RowRecord{}, fmt.Errorf("%w: not a row record", ledger.ErrFormat)
	}
	d := rowReader{b: b[1:]}
	r := d.row()
	if b[0] == encRowX {
		d.ext(&r)
	}
	return r, d.err
}

func decodeRows(b []byte) ([]ledger.RowRecord, error) {
	if len(b) == 0 || (b[0] != encRows && b[0] != encRowsX) {
		return nil, fmt.Errorf("%w: not a rows record", ledger.ErrFormat)
	}
	ext := b[0] == encRowsX
	d := rowReader{b: b[1:]}
	n := d.uvarint()
	if n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: corrupt rows record", ledger.ErrFormat)
	}
	rows := make([]ledger.RowRecord, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		r := d.row()
		if ext {
			d.ext(&r)
		}
		rows = append(rows, r)
	}
	return rows, d.err
}

// keyRecOutput returns a key record's output without decoding its metadata.
func keyRecOutput(b []byte) (json.RawMessage, error) {
	if len(b) < 2 || (b[0] != encJSONBlob && b[0] != encKeyRec && b[0] != encKeyRec2) {
		return nil, fmt.Errorf("%w: unknown record encoding", ledger.ErrFormat)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return nil, fmt.Errorf("%w: corrupt record header", ledger.ErrFormat)
	}
	out := b[1+k+int(n):]
	if len(out) == 0 {
		return nil, nil
	}
	return json.RawMessage(append([]byte(nil), out...)), nil
}
