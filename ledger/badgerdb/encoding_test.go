package badgerdb

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Events round-trip (byte for byte the same data, whatever its shape, and
// the whole audit hash); an event cut short never decodes as the whole.
func TestEventEncoding(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789012, time.UTC)
	key := "dk1_" + strings.Repeat("0123456789abcdef", 4)
	evs := []ledger.Event{
		{Seq: 1, RunID: "r", Type: ledger.EventType("run.created"), At: at, Data: json.RawMessage(`{"goal":"g"}`),
			Hash: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{Seq: 1 << 40, RunID: "run with spaces", Type: ledger.EventType("action.claimed"), ActionID: "a1", At: at.Add(time.Hour)},
		{Seq: 7, RunID: "r", Type: ledger.EventType("x"), At: time.Unix(0, 0).UTC(), Hash: "sha256:SHOUTING"},
		{Seq: 8, RunID: "r", Type: ledger.EventType("x"), At: at, Hash: "md5:abc", Data: json.RawMessage(`[1,2]`)},
		{Seq: 9, RunID: "r", Type: ledger.EventActionClaimed, ActionID: "a1", At: at, Data: json.RawMessage(`{"attempt":1,"key":"` + key + `"}`)},
		{Seq: 10, RunID: "r", Type: ledger.EventActionClaimed, ActionID: "a1", At: at,
			Data: json.RawMessage(`{"attempt":12,"key":"` + key + `","approved_by":["cli:bob"],"rule":"r","budgets":[{"b":1}]}`)},
		{Seq: 11, RunID: "r", Type: ledger.EventActionClaimed, ActionID: "a1", At: at, Data: json.RawMessage(`{"attempt":1,"key":"my key <1>"}`)},
		{Seq: 12, RunID: "r", Type: ledger.EventActionClaimed, ActionID: "a1", At: at, Data: json.RawMessage(`{"attempt":1,"key":"dk1_ABC"}`)},
		{Seq: 13, RunID: "r", Type: ledger.EventActionClaimed, ActionID: "a1", At: at, Data: json.RawMessage(`{"attempt": 1,"key":"k"}`)},
		{Seq: 14, RunID: "r", Type: ledger.EventActionApproved, ActionID: "a1", At: at, Data: json.RawMessage(`{"by":"policy"}`)},
		{Seq: 15, RunID: "r", Type: ledger.EventActionApproved, ActionID: "a1", At: at, Data: json.RawMessage(`{"by":"a\u003cb \"c\""}`)},
		{Seq: 16, RunID: "r", Type: ledger.EventActionApproved, ActionID: "a1", At: at, Data: json.RawMessage(`{"by":"a<b"}`)},
		{Seq: 17, RunID: "r", Type: ledger.EventActionSucceeded, ActionID: "a1", At: at, Data: json.RawMessage(`{"output":{"n":1}}`)},
		{Seq: 18, RunID: "r", Type: ledger.EventActionSucceeded, ActionID: "a1", At: at, Data: json.RawMessage(`{"output":1,"x":2}`)},
		{Seq: 19, RunID: "r", Type: ledger.EventActionResolved, ActionID: "a1", At: at, Data: json.RawMessage(`{"resolution":"done","by":"p","output":[]}`)},
		{Seq: 20, RunID: "r", Type: ledger.EventActionSucceeded, ActionID: "a1", At: at, Data: json.RawMessage(`{"output": {"n":1}}`)},
	}
	for _, ev := range evs {
		v := encodeEvent(ev)
		got, err := decodeEvent(ev.RunID, ev.Seq, v)
		if err != nil || !reflect.DeepEqual(got, ev) {
			t.Fatalf("round trip of %+v (%q):\n%+v, %v", ev, v, got, err)
		}
		for n := range len(v) {
			if got, err := decodeEvent(ev.RunID, ev.Seq, v[:n]); err == nil && reflect.DeepEqual(got, ev) {
				t.Fatalf("event %d cut to %d bytes decoded as the whole", ev.Seq, n)
			}
		}
	}
	// The commonest shapes lose their JSON framing: the key of a claim
	// takes its 32 bytes; the audit hash its 32.
	claim := evs[4]
	claim.Hash = evs[0].Hash
	if v := encodeEvent(claim); len(v) > 9+1+3+1+32+1+1+1+32 {
		t.Fatalf("action.claimed takes %d bytes: %q", len(v), v)
	}
}

// Key records round-trip, with their args (inline or as a blob reference),
// their output readable without decoding the rest; they hold neither their
// key nor an incarnation as text; one cut short never decodes.
func TestKeyRecordEncoding(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789012, time.UTC)
	recs := []ledger.KeyRecord{
		{Key: "dk1_abc", RunID: "r", ActionID: "a1", Tool: "pay", Args: json.RawMessage(`{"amount":"12.50"}`), State: ledger.StatusSucceeded,
			Attempt: 2, Owner: "inc-1", ClaimedAt: at, UpdatedAt: at.Add(time.Second), FirstClaimedAt: at.Add(-time.Minute),
			Output: json.RawMessage(`{"id":"ch_1"}`), MaybeTookEffect: true},
		{Key: "dk1_def", RunID: "r", ActionID: "a2", Tool: "t", Args: json.RawMessage(`{}`), State: ledger.StatusFailed, Attempt: 1,
			ClaimedAt: at, UpdatedAt: at, FirstClaimedAt: at, Error: "boom", Retryable: true, Failure: ledger.FailureNotSent},
		{Key: "dk1_ghi", RunID: "r", ActionID: "a3", Tool: "t", Args: json.RawMessage(`{"x":[1,2]}`), State: ledger.StatusPending},
		{Key: "dk1_pqr", RunID: "r", ActionID: "a6", Tool: "t", Args: json.RawMessage(`{}`), State: ledger.StatusClaimed, Attempt: 1,
			Owner: "inc_0123456789abcdef", ClaimedAt: at, UpdatedAt: at, FirstClaimedAt: at},
		{Key: "dk1_stu", RunID: "r", ActionID: "a7", Tool: "t", Args: json.RawMessage(`{}`), State: ledger.StatusClaimed, Attempt: 1,
			Owner: "inc_0123456789ABCDEF", ClaimedAt: at, UpdatedAt: at, FirstClaimedAt: at},
		{Key: "dk1_jkl", RunID: "r", ActionID: "a4", Tool: "t", Args: json.RawMessage(`{}`), State: "some_future_state",
			ClaimedAt: at, UpdatedAt: at.Add(-time.Second), FirstClaimedAt: at},
		{Key: "dk1_mno", RunID: "r", ActionID: "a5", Tool: "t", Args: refOf(strings.Repeat("ab", 32)), State: ledger.StatusClaimed,
			Attempt: 1, ClaimedAt: at, UpdatedAt: at, FirstClaimedAt: at},
		{Key: "k", RunID: "r", ActionID: "a8", State: ledger.StatusPending, UpdatedAt: at},
	}
	for _, k := range recs {
		v := encodeKeyRec(k)
		got, err := decodeKeyRec(k.RunID, k.Key, v)
		if err != nil || !reflect.DeepEqual(got, k) {
			t.Fatalf("round trip of %+v:\n%+v, %v", k, got, err)
		}
		if out, err := keyRecOutput(v); err != nil || string(out) != string(k.Output) {
			t.Fatalf("output of %s: %s, %v", k.Key, out, err)
		}
		if bytes.Contains(v, []byte(k.Key)) || (k.Owner == "inc_0123456789abcdef" && bytes.Contains(v, []byte(k.Owner))) {
			t.Fatalf("key record %q holds its key, or an incarnation as text", v)
		}
		for n := range len(v) - len(k.Output) {
			if _, err := decodeKeyRec(k.RunID, k.Key, v[:n]); err == nil {
				t.Fatalf("key record %s cut to %d bytes decoded without an error", k.Key, n)
			}
		}
	}
	for _, bad := range [][]byte{nil, {200}, {5, '{', '}'}, {1, 0xff}} {
		if _, err := decodeKeyRec("r", "k", bad); err == nil {
			t.Errorf("decode(%v) succeeded", bad)
		}
	}
}

// Initial rows with a table of tools and approved args that are the args
// not repeated; row records holding only what changed since their initial
// row (or everything, without one).
func TestRowEncoding(t *testing.T) {
	t.Parallel()
	gate := &ledger.Gate{Rule: "four-eyes", Need: 2}
	key := "dk1_" + strings.Repeat("ab", 32)
	initial := []ledger.RowRecord{
		{ID: "a0", Tool: "pay", Class: "keyed", Status: ledger.StatusApproved, Args: json.RawMessage(`{"n":0}`),
			ApprovedArgs: json.RawMessage(`{"n":0}`), Ord: 0},
		{ID: "a1", Tool: "mail", Class: "some_class", Status: ledger.StatusPending, Args: json.RawMessage(`{"to":"${a0.output.id}"}`),
			DependsOn: []string{"a0"}, Ord: 1, Gate: gate},
		{ID: "a2", Tool: "pay", Class: "", Status: "future", Args: json.RawMessage(`{}`), ApprovedArgs: json.RawMessage(`{"n":1}`),
			Ord: 7, Undo: true, Key: "k", Attempts: 2, Error: "e"},
	}
	enc := encodeRows(initial)
	got, err := decodeRows(enc)
	if err != nil || !reflect.DeepEqual(got, initial) {
		t.Fatalf("rows round trip:\n got  %+v (%v)\n want %+v", got, err, initial)
	}
	for i := range len(enc) {
		if _, err := decodeRows(enc[:i]); err == nil {
			t.Fatalf("rows cut to %d/%d bytes decoded", i, len(enc))
		}
	}
	if bytes.Count(enc, []byte(`{"n":0}`)) != 1 || bytes.Count(enc, []byte("pay")) != 1 {
		t.Fatalf("approved args that are the args, or a tool, stored twice: %q", enc)
	}
	if _, err := decodeRows([]byte{0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Fatal("rows record with a huge count decoded")
	}
	claimed := initial[0]
	claimed.Key, claimed.Status, claimed.Attempts = key, ledger.StatusClaimed, 1
	edited := initial[1]
	edited.Gate, edited.Approvals, edited.DependsOn, edited.Class = nil, []ledger.Approval{{By: "bob"}}, nil, "keyed"
	undo := ledger.RowRecord{ID: "a0.undo", Tool: "refund", Class: "keyed", Status: ledger.StatusPending, Undo: true, Ord: 3}
	for _, c := range []struct {
		r    ledger.RowRecord
		base *ledger.RowRecord
		max  int
	}{
		{claimed, &initial[0], 1 + 1 + 32 + 1 + 1 + 8 + 1},
		{edited, &initial[1], 0},
		{initial[2], &initial[2], 0},
		{undo, nil, 0},
	} {
		v := encodeRow(c.r, c.base)
		if c.max > 0 && len(v) > c.max {
			t.Fatalf("row %s takes %d bytes: %q", c.r.ID, len(v), v)
		}
		got, err := decodeRowRecord(c.r.ID, v, c.base)
		if err != nil || !reflect.DeepEqual(got, c.r) {
			t.Fatalf("row round trip:\n got  %+v (%v)\n want %+v", got, err, c.r)
		}
		if rowNeedsBase(v) != (c.base != nil) {
			t.Fatalf("row %s: needs its initial row: %v", c.r.ID, rowNeedsBase(v))
		}
		if c.base != nil {
			if _, err := decodeRowRecord(c.r.ID, v, nil); err == nil {
				t.Fatalf("row %s decoded without its initial row", c.r.ID)
			}
		}
		for i := range len(v) {
			if _, err := decodeRowRecord(c.r.ID, v[:i], c.base); err == nil {
				t.Fatalf("row %s cut to %d/%d bytes decoded", c.r.ID, i, len(v))
			}
		}
	}
}

// Plan records round-trip: with their actions (and blob references), or
// leaving them to the rows (with or without why texts).
func TestPlanRecordEncoding(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("cd", 32)
	for _, r := range []planRec{
		{rest: []byte(`{"goal":"g","actions":[]}`)},
		{refs: map[string]string{"0": h, "12": strings.Repeat("ef", 32)}, rest: []byte(`{"actions":[{"args":null}]}`)},
		{inRows: true, rest: []byte(`{"goal":"g"}`)},
		{inRows: true, whys: []string{"", "because"}, rest: []byte(`{}`)},
	} {
		v := encodePlanRec(r)
		got, err := decodePlanRec(v)
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v (%q): %+v, %v", r, v, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {1, 0, 3, 'a', 'b', 'c', 0}, {0, 0xff, 0xff, 0x03}, encodePlanRec(planRec{refs: map[string]string{"0": h}})[:10]} {
		if _, err := decodePlanRec(bad); err == nil {
			t.Errorf("decodePlanRec(%q) succeeded", bad)
		}
	}
}
