package badgerdb

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Events round-trip through the binary encoding, and records of the JSON
// encoding it replaced still decode to the same event.
func TestEventEncoding(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789012, time.UTC)
	evs := []ledger.Event{
		{Seq: 1, RunID: "r", Type: ledger.EventType("run.created"), At: at, Data: json.RawMessage(`{"goal":"g"}`),
			Hash: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{Seq: 1 << 40, RunID: "run with spaces", Type: ledger.EventType("action.claimed"), ActionID: "a1", At: at.Add(time.Hour)},
		{Seq: 7, RunID: "r", Type: ledger.EventType("x"), At: time.Unix(0, 0).UTC(), Hash: "sha256:SHOUTING"},
		{Seq: 8, RunID: "r", Type: ledger.EventType("x"), At: at, Hash: "md5:abc", Data: json.RawMessage(`[1,2]`)},
	}
	for _, ev := range evs {
		v, err := encodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != encEvent {
			t.Fatalf("event %d encoded with tag %d", ev.Seq, v[0])
		}
		got, err := decodeEvent(v)
		if err != nil || !reflect.DeepEqual(got, ev) {
			t.Fatalf("round trip of %+v: %+v, %v", ev, got, err)
		}
		data := ev.Data
		ev.Data = nil
		old, err := encode(ev, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.Data = data
		if got, err := decodeEvent(old); err != nil || !reflect.DeepEqual(got, ev) {
			t.Fatalf("JSON record of %+v: %+v, %v", ev, got, err)
		}
		for n := 1; n < len(v)-len(ev.Data); n++ {
			if _, err := decodeEvent(v[:n]); err == nil {
				t.Fatalf("event %d cut to %d bytes decoded without an error", ev.Seq, n)
			}
		}
	}
}

// Key records round-trip through the binary encoding (outputs readable
// without decoding the rest), and records of the JSON encoding it replaced
// still decode to the same record.
func TestKeyRecordEncoding(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789012, time.UTC)
	recs := []ledger.KeyRecord{
		{Key: "dk1_abc", RunID: "r", ActionID: "a1", Tool: "pay", Args: json.RawMessage(`{"amount":"12.50"}`), State: ledger.StatusSucceeded,
			Attempt: 2, Owner: "inc-1", ClaimedAt: at, UpdatedAt: at.Add(time.Second), FirstClaimedAt: at.Add(-time.Minute),
			Output: json.RawMessage(`{"id":"ch_1"}`), MaybeTookEffect: true},
		{Key: "dk1_def", RunID: "r", ActionID: "a2", Tool: "t", Args: json.RawMessage(`{}`), State: ledger.StatusFailed, Attempt: 1,
			ClaimedAt: at, UpdatedAt: at, Error: "boom", Retryable: true, Failure: ledger.FailureNotSent},
		{Key: "dk1_ghi", RunID: "r", ActionID: "a3", Tool: "t", Args: json.RawMessage(`{"x":[1,2]}`), State: ledger.StatusPending},
	}
	for _, k := range recs {
		v, err := encodeKeyRec(k)
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != encKeyRec {
			t.Fatalf("key record %s encoded with tag %d", k.Key, v[0])
		}
		got, err := decodeKeyRec(v)
		if err != nil || !reflect.DeepEqual(got, k) {
			t.Fatalf("round trip of %+v:\n%+v, %v", k, got, err)
		}
		if out, err := keyRecOutput(v); err != nil || string(out) != string(k.Output) {
			t.Fatalf("output of %s: %s, %v", k.Key, out, err)
		}
		s := storedKeyRec{KeyRecord: k, Args: k.Args}
		s.KeyRecord.Output, s.KeyRecord.Args = nil, nil
		old, err := encode(s, k.Output)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeKeyRec(old); err != nil || !reflect.DeepEqual(got, k) {
			t.Fatalf("JSON record of %+v:\n%+v, %v", k, got, err)
		}
		if out, err := keyRecOutput(old); err != nil || string(out) != string(k.Output) {
			t.Fatalf("output of the JSON record of %s: %s, %v", k.Key, out, err)
		}
		for n := 1; n < len(v)-len(k.Output); n++ {
			if _, err := decodeKeyRec(v[:n]); err == nil {
				t.Fatalf("key record %s cut to %d bytes decoded without an error", k.Key, n)
			}
		}
	}
}
