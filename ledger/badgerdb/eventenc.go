package badgerdb

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Events are written in a binary encoding (a run has several per action, so
// JSON metadata was a good part of the bytes and of the CPU of each step):
//
//	encEvent, seq (uvarint), at (varint, Unix nanoseconds, UTC), run id,
//	type, action id (each uvarint length + bytes), hash form (one byte:
//	0 none, 1 "sha256:" + 32 raw bytes, 2 uvarint length + bytes), then the
//	data, raw JSON, to the end.
//
// Events written before it (encJSONBlob, JSON metadata) decode as they did:
// a data directory keeps its old events and appends new ones after them.
const encEvent = 6

const (
	hashNone   = 0
	hashSHA256 = 1
	hashString = 2
)

const sha256Prefix = "sha256:"

func encodeEvent(e ledger.Event) ([]byte, error) {
	b := make([]byte, 0, 40+len(e.RunID)+len(e.Type)+len(e.ActionID)+32+len(e.Data))
	b = append(b, encEvent)
	b = binary.AppendUvarint(b, e.Seq)
	b = binary.AppendVarint(b, e.At.UnixNano())
	b = appendStr(b, e.RunID)
	b = appendStr(b, string(e.Type))
	b = appendStr(b, e.ActionID)
	switch raw, ok := sha256Hash(e.Hash); {
	case e.Hash == "":
		b = append(b, hashNone)
	case ok:
		b = append(append(b, hashSHA256), raw...)
	default:
		b = appendStr(append(b, hashString), e.Hash)
	}
	return append(b, e.Data...), nil
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

func decodeEvent(b []byte) (ledger.Event, error) {
	if len(b) > 0 && b[0] == encJSONBlob {
		return decodeJSONEvent(b)
	}
	if len(b) == 0 || b[0] != encEvent {
		return ledger.Event{}, fmt.Errorf("%w: not an event record", ledger.ErrFormat)
	}
	d := rowReader{b: b[1:]}
	var e ledger.Event
	e.Seq = d.uvarint()
	if d.err == nil {
		at, n := binary.Varint(d.b)
		if n <= 0 {
			return e, fmt.Errorf("%w: truncated event record", ledger.ErrFormat)
		}
		d.b = d.b[n:]
		e.At = time.Unix(0, at).UTC()
	}
	e.RunID = d.str()
	e.Type = ledger.EventType(d.str())
	e.ActionID = d.str()
	switch form := d.bytes(1); {
	case d.err != nil:
	case form[0] == hashNone:
	case form[0] == hashSHA256:
		if raw := d.bytes(32); d.err == nil {
			e.Hash = sha256Prefix + hex.EncodeToString(raw)
		}
	case form[0] == hashString:
		e.Hash = d.str()
	default:
		return e, fmt.Errorf("%w: event %d: unknown hash form %d", ledger.ErrFormat, e.Seq, form[0])
	}
	if d.err != nil {
		return e, d.err
	}
	if len(d.b) > 0 {
		e.Data = append([]byte(nil), d.b...)
	}
	return e, nil
}

// decodeJSONEvent decodes an event of the JSON metadata encoding.
func decodeJSONEvent(b []byte) (ledger.Event, error) {
	var e ledger.Event
	blob, err := decode(b, &e)
	if err != nil {
		return e, err
	}
	if len(blob) > 0 {
		e.Data = append([]byte(nil), blob...)
	}
	return e, nil
}
