package badgerdb

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/docketrun/docket/ledger"
)

// Rows are the most numerous records a resume reads, so they have a compact
// binary encoding (JSON decoding dominated the cost of loading a
// 10,000-action run). A revision's initial rows are one record
// (b\0<run>\0<rev>):
//
//	count (uvarint), the tools (uvarint count, then strings), then each
//	row: flags (one byte: rowSameApproved, rowUndo, rowOrdIsIndex,
//	rowWithExt), id (string), tool (uvarint index in the tools), class
//	(appendClass), key (appendKey), status (appendStatus), attempts
//	(uvarint), args (appendRaw), depends_on (appendDeps), error (string),
//	then approved_args (appendRaw) unless rowSameApproved, ord (uvarint)
//	unless rowOrdIsIndex, the extension (appendExt: gate and approvals)
//	with rowWithExt.
//
// A row that changed since the revision was recorded has a row record
// (a\0<run>\0<rev><id>) holding what changed, its id being in its Badger
// key:
//
//	mask (uvarint: which of the static fields follow; the others are the
//	row's initial ones, from the revision's rows record), key, status,
//	attempts, args, error, then the static fields the mask names, in this
//	order: tool (string), class, depends_on, approved_args, undo (one
//	byte, 0 or 1), ord (uvarint), extension.
//
// A row without an initial one (a compensating row) names them all.
//
// Strings are a uvarint length and the bytes.
// The static fields of a row record's mask.
const (
	rowHasTool = 1 << iota
	rowHasClass
	rowHasDeps
	rowHasApproved
	rowHasUndo
	rowHasOrd
	rowHasExt
	rowHasAll = 1<<iota - 1
)

// The flags of a row in a rows record.
const (
	rowSameApproved = 1 << iota // approved_args are the args (bytes equal, both set)
	rowUndo
	rowOrdIsIndex
	rowWithExt
	rowFlags = 1<<iota - 1
)

// classCodes are the one-byte codes of the effect classes (never
// renumbered); 0: the class's text follows.
var classCodes = []string{1: "read_only", 2: "idempotent", 3: "keyed", 4: "lookup", 5: "at_most_once"}

func appendClass(b []byte, c string) []byte {
	for i, v := range classCodes {
		if i > 0 && v == c {
			return append(b, byte(i))
		}
	}
	return appendStr(append(b, 0), c)
}

func (d *rowReader) class() string {
	c := d.bytes(1)
	switch {
	case d.err != nil:
		return ""
	case c[0] == 0:
		return d.str()
	case int(c[0]) < len(classCodes):
		return classCodes[c[0]]
	}
	d.err = fmt.Errorf("%w: unknown class code %d", ledger.ErrFormat, c[0])
	return ""
}

func appendDeps(b []byte, deps []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(deps)))
	for _, d := range deps {
		b = appendStr(b, d)
	}
	return b
}

func (d *rowReader) deps() []string {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: truncated row record", ledger.ErrFormat)
		return nil
	}
	deps := make([]string, n)
	for i := range deps {
		deps[i] = d.str()
	}
	return deps
}

// encodeRow encodes r as a row record; base is its initial row (nil:
// none).
func encodeRow(r ledger.RowRecord, base *ledger.RowRecord) []byte {
	var ext []byte
	if extended(r) {
		ext = appendExt(nil, r)
	}
	mask := rowHasAll
	if base != nil {
		mask = rowChanges(r, *base, ext)
	}
	b := make([]byte, 0, 64+len(r.Args)+len(r.ApprovedArgs)+len(ext))
	b = binary.AppendUvarint(b, uint64(mask))
	b = appendKey(b, r.Key)
	b = appendStatus(b, r.Status)
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = appendRaw(b, r.Args)
	b = appendStr(b, r.Error)
	if mask&rowHasTool != 0 {
		b = appendStr(b, r.Tool)
	}
	if mask&rowHasClass != 0 {
		b = appendClass(b, r.Class)
	}
	if mask&rowHasDeps != 0 {
		b = appendDeps(b, r.DependsOn)
	}
	if mask&rowHasApproved != 0 {
		b = appendRaw(b, r.ApprovedArgs)
	}
	if mask&rowHasUndo != 0 {
		b = append(b, boolByte(r.Undo))
	}
	if mask&rowHasOrd != 0 {
		b = binary.AppendUvarint(b, uint64(r.Ord))
	}
	if mask&rowHasExt != 0 {
		if ext == nil {
			ext = appendRaw(nil, nil)
		}
		b = append(b, ext...)
	}
	return b
}

// rowChanges is the mask of r's static fields that differ from its
// initial row base (ext: r's extension).
func rowChanges(r, base ledger.RowRecord, ext []byte) int {
	mask := 0
	if r.Tool != base.Tool {
		mask |= rowHasTool
	}
	if r.Class != base.Class {
		mask |= rowHasClass
	}
	if !slices.Equal(r.DependsOn, base.DependsOn) || (r.DependsOn == nil) != (base.DependsOn == nil) {
		mask |= rowHasDeps
	}
	if !bytes.Equal(r.ApprovedArgs, base.ApprovedArgs) || (r.ApprovedArgs == nil) != (base.ApprovedArgs == nil) {
		mask |= rowHasApproved
	}
	if r.Undo != base.Undo {
		mask |= rowHasUndo
	}
	if r.Ord != base.Ord {
		mask |= rowHasOrd
	}
	var baseExt []byte
	if extended(base) {
		baseExt = appendExt(nil, base)
	}
	if !bytes.Equal(ext, baseExt) {
		mask |= rowHasExt
	}
	return mask
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// rowNeedsBase reports whether a row record names fields it leaves to its
// initial row.
func rowNeedsBase(b []byte) bool {
	mask, n := binary.Uvarint(b)
	return n > 0 && mask != rowHasAll
}

// decodeRowRecord decodes the row record of action id. base is the row's
// initial row (nil: none): a record that leaves fields to it is then an
// error.
func decodeRowRecord(id string, b []byte, base *ledger.RowRecord) (ledger.RowRecord, error) {
	d := rowReader{b: b}
	mask := d.uvarint()
	if d.err == nil && mask&^rowHasAll != 0 {
		return ledger.RowRecord{}, fmt.Errorf("%w: row %q: unknown fields %#x", ledger.ErrFormat, id, mask)
	}
	var r ledger.RowRecord
	switch {
	case base != nil:
		r = *base
	case mask != rowHasAll && d.err == nil:
		return r, fmt.Errorf("%w: row %q of a revision without its initial row", ledger.ErrFormat, id)
	}
	r.ID = id
	r.Key = d.key()
	r.Status = d.status()
	r.Attempts = d.int()
	r.Args = d.raw()
	r.Error = d.str()
	if mask&rowHasTool != 0 {
		r.Tool = d.str()
	}
	if mask&rowHasClass != 0 {
		r.Class = d.class()
	}
	if mask&rowHasDeps != 0 {
		r.DependsOn = d.deps()
	}
	if mask&rowHasApproved != 0 {
		r.ApprovedArgs = d.raw()
	}
	if mask&rowHasUndo != 0 {
		r.Undo = d.bool()
	}
	if mask&rowHasOrd != 0 {
		r.Ord = d.int()
	}
	if mask&rowHasExt != 0 {
		r.Gate, r.Approvals = nil, nil
		d.ext(&r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: row %q: %d bytes after its fields", ledger.ErrFormat, id, len(d.b))
	}
	return r, d.err
}

// encodeRows encodes a revision's initial rows as a rows record.
func encodeRows(rows []ledger.RowRecord) []byte {
	var tools []string
	toolIdx := map[string]int{}
	for _, r := range rows {
		if _, ok := toolIdx[r.Tool]; !ok {
			toolIdx[r.Tool] = len(tools)
			tools = append(tools, r.Tool)
		}
	}
	b := binary.AppendUvarint(nil, uint64(len(rows)))
	b = binary.AppendUvarint(b, uint64(len(tools)))
	for _, t := range tools {
		b = appendStr(b, t)
	}
	for i, r := range rows {
		var flags byte
		if r.Args != nil && bytes.Equal(r.ApprovedArgs, r.Args) {
			flags |= rowSameApproved
		}
		if r.Undo {
			flags |= rowUndo
		}
		if r.Ord == i {
			flags |= rowOrdIsIndex
		}
		if extended(r) {
			flags |= rowWithExt
		}
		b = append(b, flags)
		b = appendStr(b, r.ID)
		b = binary.AppendUvarint(b, uint64(toolIdx[r.Tool]))
		b = appendClass(b, r.Class)
		b = appendKey(b, r.Key)
		b = appendStatus(b, r.Status)
		b = binary.AppendUvarint(b, uint64(r.Attempts))
		b = appendRaw(b, r.Args)
		b = appendDeps(b, r.DependsOn)
		b = appendStr(b, r.Error)
		if flags&rowSameApproved == 0 {
			b = appendRaw(b, r.ApprovedArgs)
		}
		if flags&rowOrdIsIndex == 0 {
			b = binary.AppendUvarint(b, uint64(r.Ord))
		}
		if flags&rowWithExt != 0 {
			b = appendExt(b, r)
		}
	}
	return b
}

func decodeRows(b []byte) ([]ledger.RowRecord, error) {
	d := rowReader{b: b}
	n := d.uvarint()
	nt := d.uvarint()
	if d.err != nil || n > uint64(len(b)) || nt > uint64(len(b)) {
		return nil, cmp.Or(d.err, fmt.Errorf("%w: corrupt rows record", ledger.ErrFormat))
	}
	tools := make([]string, nt)
	for i := range tools {
		tools[i] = d.str()
	}
	rows := make([]ledger.RowRecord, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var r ledger.RowRecord
		var flags byte
		if f := d.bytes(1); d.err == nil {
			if flags = f[0]; flags&^rowFlags != 0 {
				d.err = fmt.Errorf("%w: rows record: row %d has unknown flags %#x", ledger.ErrFormat, i, flags)
			}
		}
		r.ID = d.str()
		if t := d.uvarint(); d.err == nil && t >= uint64(len(tools)) {
			d.err = fmt.Errorf("%w: row %q names tool %d of %d", ledger.ErrFormat, r.ID, t, len(tools))
		} else if d.err == nil {
			r.Tool = tools[t]
		}
		r.Class = d.class()
		r.Key = d.key()
		r.Status = d.status()
		r.Attempts = d.int()
		r.Args = d.raw()
		r.DependsOn = d.deps()
		r.Error = d.str()
		if flags&rowSameApproved != 0 {
			r.ApprovedArgs = r.Args
		} else {
			r.ApprovedArgs = d.raw()
		}
		r.Undo = flags&rowUndo != 0
		if flags&rowOrdIsIndex != 0 {
			r.Ord = int(i)
		} else {
			r.Ord = d.int()
		}
		if flags&rowWithExt != 0 {
			d.ext(&r)
		}
		rows = append(rows, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: rows record: %d bytes after its rows", ledger.ErrFormat, len(d.b))
	}
	return rows, d.err
}

// rowExt holds the fields of a row's extension: its gate, approvals,
// timer and tool wait (JSON, written only when a row has one of them).
type rowExt struct {
	Gate      *ledger.Gate      `json:"gate,omitempty"`
	Approvals []ledger.Approval `json:"approvals,omitempty"`
	Timer     *ledger.Timer     `json:"timer,omitempty"`
	ToolWait  *ledger.ToolWait  `json:"tool_wait,omitempty"`
}

func extended(r ledger.RowRecord) bool {
	return r.Gate != nil || len(r.Approvals) > 0 || r.Timer != nil || r.ToolWait != nil
}

func appendExt(b []byte, r ledger.RowRecord) []byte {
	if !extended(r) {
		return appendRaw(b, nil)
	}
	ext, err := json.Marshal(rowExt{Gate: r.Gate, Approvals: r.Approvals, Timer: r.Timer, ToolWait: r.ToolWait})
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

// int reads a uvarint that must fit an int.
func (d *rowReader) int() int {
	v := d.uvarint()
	if v > math.MaxInt && d.err == nil {
		d.err = fmt.Errorf("%w: number %d out of range", ledger.ErrFormat, v)
		return 0
	}
	return int(v)
}

func (d *rowReader) bool() bool {
	switch v := d.bytes(1); {
	case d.err != nil:
		return false
	case v[0] > 1:
		d.err = fmt.Errorf("%w: boolean %d", ledger.ErrFormat, v[0])
		return false
	default:
		return v[0] == 1
	}
}

func (d *rowReader) str() string { return string(d.bytes(d.uvarint())) }

func (d *rowReader) raw() json.RawMessage {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	return json.RawMessage(append([]byte(nil), d.bytes(n-1)...))
}

// ext decodes a row's extension (appendExt).
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
	r.Gate, r.Approvals, r.Timer, r.ToolWait = e.Gate, e.Approvals, e.Timer, e.ToolWait
}
