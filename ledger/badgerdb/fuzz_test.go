package badgerdb

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Each on-disk record kind has a fuzz target. Its input is used twice:
//   - as a stored record: decoding it never panics, and either fails or
//     gives a record that encodes into bytes which decode to the same
//     record (and encode to the same bytes again);
//   - as the source of a record's fields (gen): decode(encode(r)) == r.
//
// go test ./ledger/badgerdb -run '^$' -fuzz '^FuzzKeyRecord$' -fuzztime 30s

// gen turns fuzz input into fields: each call takes what it needs from the
// front of b (zeros once it runs out), so every input is a record.
type gen struct{ b []byte }

func (g *gen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *gen) bytes(n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = g.byte()
	}
	return out
}

func (g *gen) bool() bool { return g.byte()&1 == 1 }

// int is a non-negative int, small or large.
func (g *gen) int() int {
	if g.bool() {
		return int(g.byte() % 8)
	}
	return int(binary.BigEndian.Uint32(g.bytes(4)))
}

var genWords = []string{"pending", "approved", "claimed", "succeeded", "failed", "needs_review", "skipped",
	"compensated", "read_only", "keyed", "at_most_once", "action.claimed", "run.created", "action.succeeded",
	"policy", "cli:bob", "a0", "pay", "some_future_state"}

// str is "", a word the encodings give a code to, a string of the shapes
// they store compactly (dk1 key, incarnation, hash), or arbitrary bytes.
func (g *gen) str() string {
	switch g.byte() % 7 {
	case 0:
		return ""
	case 1:
		return genWords[int(g.byte())%len(genWords)]
	case 2:
		return dk1Prefix + hex.EncodeToString(g.bytes(32))
	case 3:
		return incPrefix + hex.EncodeToString(g.bytes(8))
	case 4:
		return sha256Prefix + hex.EncodeToString(g.bytes(32))
	default:
		return string(g.bytes(int(g.byte() % 24)))
	}
}

// text is str as valid UTF-8, for the records stored as JSON: encoding/json
// replaces each invalid byte of a string by U+FFFD, so only valid text
// round-trips exactly (arbitrary bytes are the other half of each target).
func (g *gen) text() string { return strings.ToValidUTF8(g.str(), "?") }

// raw is nil, JSON, arbitrary bytes, or a blob reference.
func (g *gen) raw() json.RawMessage {
	switch g.byte() % 5 {
	case 0:
		return nil
	case 1:
		return json.RawMessage(fmt.Sprintf(`{"n":%d,"s":%q}`, g.int(), g.str()))
	case 2:
		return refOf(hex.EncodeToString(g.bytes(32)))
	default:
		return json.RawMessage(g.bytes(1 + int(g.byte()%32)))
	}
}

// rawNoRef is raw without blob references (where records hold none).
func (g *gen) rawNoRef() json.RawMessage {
	if r := g.raw(); !bytes.HasPrefix(r, refOf(strings.Repeat("0", 64))[:1]) {
		return r
	}
	return json.RawMessage(`{}`)
}

func (g *gen) time() time.Time {
	if g.byte()%4 == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(g.bytes(8)))).UTC()
}

func (g *gen) strs() []string {
	n := int(g.byte() % 4)
	if n == 0 {
		return nil
	}
	s := make([]string, n)
	for i := range s {
		s[i] = g.str()
	}
	return s
}

func (g *gen) texts() []string {
	s := g.strs()
	for i := range s {
		s[i] = strings.ToValidUTF8(s[i], "?")
	}
	return s
}

func (g *gen) keyRec() ledger.KeyRecord {
	k := ledger.KeyRecord{Key: g.str(), RunID: "r", ActionID: g.str(), Tool: g.str(), Args: g.raw(),
		State: ledger.Status(g.str()), Attempt: g.int(), Owner: g.str(), ClaimedAt: g.time(), Output: g.rawNoRef(),
		Error: g.str(), Retryable: g.bool(), UpdatedAt: g.time(), MaybeTookEffect: g.bool(), Failure: ledger.Failure(g.str())}
	if g.bool() {
		k.FirstClaimedAt = k.ClaimedAt
	} else {
		k.FirstClaimedAt = g.time()
	}
	return k
}

func (g *gen) row(ord int) ledger.RowRecord {
	r := ledger.RowRecord{ID: g.str(), Tool: g.str(), Class: g.str(), Key: g.str(), Status: ledger.Status(g.str()),
		Attempts: g.int(), Args: g.raw(), DependsOn: g.strs(), Error: g.str(), Undo: g.bool(), Ord: ord}
	if g.bool() {
		r.Ord = g.int()
	}
	if g.bool() {
		r.ApprovedArgs = r.Args
	} else {
		r.ApprovedArgs = g.raw()
	}
	if g.byte()%4 == 0 {
		r.Gate = &ledger.Gate{Rule: g.text(), Outcome: g.text(), Need: g.int(), Names: g.texts()}
	}
	if g.byte()%4 == 0 { // the extension is JSON: text
		r.Approvals = []ledger.Approval{{By: g.text(), Groups: g.texts(), At: g.time(), Args: g.text(), Used: g.text()}}
	}
	return r
}

// changed is base with some fields changed (every field a row record may
// hold or leave to its initial row).
func (g *gen) changed(base ledger.RowRecord) ledger.RowRecord {
	r, o := base, g.row(base.Ord)
	r.Key, r.Status, r.Attempts, r.Args, r.Error = o.Key, o.Status, o.Attempts, o.Args, o.Error
	for _, f := range []func(){
		func() { r.Tool = o.Tool }, func() { r.Class = o.Class }, func() { r.DependsOn = o.DependsOn },
		func() { r.ApprovedArgs = o.ApprovedArgs }, func() { r.Undo = o.Undo }, func() { r.Ord = o.Ord },
		func() { r.Gate, r.Approvals = o.Gate, o.Approvals },
	} {
		if g.bool() {
			f()
		}
	}
	return r
}

func (g *gen) event() ledger.Event {
	e := ledger.Event{Seq: 7, RunID: "r", Type: ledger.EventType(g.str()), ActionID: g.str(),
		At: time.Unix(0, int64(binary.BigEndian.Uint64(g.bytes(8)))).UTC(), Hash: g.str()}
	switch g.byte() % 5 {
	case 0:
	case 1:
		e.Data = append(append([]byte(`{"output":`), g.raw()...), '}')
	case 2:
		e.Data = byData(g.str())
	case 3:
		e.Data = claimData(uint64(g.int()), g.str(), g.bytes(int(g.byte()%8)))
	default:
		e.Data = g.bytes(1 + int(g.byte()%40))
	}
	return e
}

func (g *gen) planRec() planRec {
	var r planRec
	if r.inRows = g.bool(); r.inRows {
		r.whys = g.strs()
	} else if n := int(g.byte() % 3); n > 0 {
		r.refs = map[string]string{}
		for range n {
			r.refs[fmt.Sprint(g.int())] = hex.EncodeToString(g.bytes(32))
		}
	}
	if rest := g.bytes(int(g.byte() % 40)); len(rest) > 0 {
		r.rest = rest
	}
	return r
}

func FuzzKeyRecord(f *testing.F) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 4, time.UTC)
	f.Add(encodeKeyRec(ledger.KeyRecord{ActionID: "a1", Tool: "pay", Args: json.RawMessage(`{"n":1}`), State: ledger.StatusSucceeded,
		Attempt: 2, Owner: "inc_0123456789abcdef", ClaimedAt: at, UpdatedAt: at.Add(time.Second), FirstClaimedAt: at,
		Output: json.RawMessage(`{"id":"ch_1"}`), MaybeTookEffect: true}))
	f.Add(encodeKeyRec(ledger.KeyRecord{Args: refOf(strings.Repeat("ab", 32)), State: "future", Error: "e", Failure: "unknown"}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r1, err := decodeKeyRec("r", "k", b); err == nil {
			v := encodeKeyRec(r1)
			r2, err := decodeKeyRec("r", "k", v)
			if err != nil || !reflect.DeepEqual(r2, r1) || !bytes.Equal(encodeKeyRec(r2), v) {
				t.Fatalf("%q decoded as %+v, which encodes as %q, decoded as %+v, %v", b, r1, v, r2, err)
			}
		}
		g := gen{b: b}
		k := g.keyRec()
		got, err := decodeKeyRec(k.RunID, k.Key, encodeKeyRec(k))
		if err != nil || !reflect.DeepEqual(got, k) {
			t.Fatalf("round trip of %+v:\n%+v, %v", k, got, err)
		}
		if out, err := keyRecOutput(encodeKeyRec(k)); err != nil || !bytes.Equal(out, k.Output) {
			t.Fatalf("output of %+v: %q, %v", k, out, err)
		}
	})
}

func FuzzEvent(f *testing.F) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 4, time.UTC)
	f.Add(encodeEvent(ledger.Event{Type: ledger.EventActionClaimed, ActionID: "a1", At: at,
		Hash: sha256Prefix + strings.Repeat("0f", 32), Data: claimData(1, dk1Prefix+strings.Repeat("ab", 32), nil)}))
	f.Add(encodeEvent(ledger.Event{Type: ledger.EventActionApproved, At: at, Data: byData("cli:bob")}))
	f.Add(encodeEvent(ledger.Event{Type: "x.y", At: at, Hash: "md5:x", Data: json.RawMessage(`{"output":[1]}`)}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if e1, err := decodeEvent("r", 7, b); err == nil {
			v := encodeEvent(e1)
			e2, err := decodeEvent("r", 7, v)
			if err != nil || !reflect.DeepEqual(e2, e1) || !bytes.Equal(encodeEvent(e2), v) {
				t.Fatalf("%q decoded as %+v, which encodes as %q, decoded as %+v, %v", b, e1, v, e2, err)
			}
		}
		g := gen{b: b}
		e := g.event()
		got, err := decodeEvent(e.RunID, e.Seq, encodeEvent(e))
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip of %+v:\n%+v, %v", e, got, err)
		}
	})
}

func FuzzRows(f *testing.F) {
	f.Add(encodeRows([]ledger.RowRecord{
		{ID: "a0", Tool: "pay", Class: "keyed", Status: ledger.StatusApproved, Args: json.RawMessage(`{"n":0}`), ApprovedArgs: json.RawMessage(`{"n":0}`)},
		{ID: "a1", Tool: "mail", Status: ledger.StatusPending, DependsOn: []string{"a0"}, Ord: 3, Gate: &ledger.Gate{Need: 2}},
	}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r1, err := decodeRows(b); err == nil {
			v := encodeRows(r1)
			r2, err := decodeRows(v)
			if err != nil || !bytes.Equal(encodeRows(r2), v) {
				t.Fatalf("%q decoded as %+v, which encodes as %q, decoded as %+v, %v", b, r1, v, r2, err)
			}
		}
		g := gen{b: b}
		var rows []ledger.RowRecord
		for i := range int(g.byte() % 5) {
			rows = append(rows, g.row(i))
		}
		got, err := decodeRows(encodeRows(rows))
		if err != nil || len(got) != len(rows) || (len(rows) > 0 && !reflect.DeepEqual(got, rows)) {
			t.Fatalf("round trip of %+v:\n%+v, %v", rows, got, err)
		}
	})
}

func FuzzRow(f *testing.F) {
	base := ledger.RowRecord{ID: "a0", Tool: "pay", Class: "keyed", Status: ledger.StatusApproved, Args: json.RawMessage(`{"n":0}`)}
	claimed := base
	claimed.Key, claimed.Status, claimed.Attempts = dk1Prefix+strings.Repeat("ab", 32), ledger.StatusClaimed, 1
	f.Add(encodeRow(claimed, &base))
	f.Add(encodeRow(ledger.RowRecord{ID: "a0.undo", Tool: "refund", Undo: true, Ord: 3, DependsOn: []string{"a0"}}, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, base := range []*ledger.RowRecord{nil, &base} {
			if r1, err := decodeRowRecord("a0", b, base); err == nil {
				v := encodeRow(r1, base)
				r2, err := decodeRowRecord("a0", v, base)
				if err != nil || !bytes.Equal(encodeRow(r2, base), v) {
					t.Fatalf("%q decoded as %+v, which encodes as %q, decoded as %+v, %v", b, r1, v, r2, err)
				}
			}
		}
		g := gen{b: b}
		initial := g.row(0)
		r := g.changed(initial)
		for _, base := range []*ledger.RowRecord{nil, &initial} {
			v := encodeRow(r, base)
			got, err := decodeRowRecord(r.ID, v, base)
			if err != nil || !reflect.DeepEqual(got, r) {
				t.Fatalf("round trip of %+v (initial row %v):\n%+v, %v", r, base != nil, got, err)
			}
			if rowNeedsBase(v) && base == nil {
				t.Fatalf("row %+v encoded without an initial row needs one", r)
			}
		}
	})
}

func FuzzPlanRecord(f *testing.F) {
	f.Add(encodePlanRec(planRec{inRows: true, whys: []string{"", "why"}, rest: []byte(`{"goal":"g"}`)}))
	f.Add(encodePlanRec(planRec{refs: map[string]string{"1": strings.Repeat("ab", 32)}, rest: []byte(`{"actions":[{},{"args":null}]}`)}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r1, err := decodePlanRec(b); err == nil {
			v := encodePlanRec(r1)
			r2, err := decodePlanRec(v)
			if err != nil || !reflect.DeepEqual(r2, r1) || !bytes.Equal(encodePlanRec(r2), v) {
				t.Fatalf("%q decoded as %+v, which encodes as %q, decoded as %+v, %v", b, r1, v, r2, err)
			}
		}
		g := gen{b: b}
		r := g.planRec()
		got, err := decodePlanRec(encodePlanRec(r))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v:\n%+v, %v", r, got, err)
		}
	})
}

// fuzzJSON checks a record kind stored as JSON (run headers, budgets,
// holds): arbitrary bytes decode or fail without panicking, a decoded
// record encodes consistently, and a generated one round-trips (compared
// as its encoding: JSON does not tell a nil slice from an empty one).
func fuzzJSON[T any](t *testing.T, b []byte, decode func([]byte) (T, error), encode func(T) ([]byte, error), generated T) {
	t.Helper()
	if r1, err := decode(b); err == nil {
		v, err := encode(r1)
		if err != nil {
			t.Fatalf("%q decoded as %+v, which does not encode: %v", b, r1, err)
		}
		r2, err := decode(v)
		if err != nil {
			t.Fatalf("%q decoded as %+v, which encodes as %q, which does not decode: %v", b, r1, v, err)
		}
		if v2, err := encode(r2); err != nil || !bytes.Equal(v2, v) {
			t.Fatalf("%q decoded as %+v, which encodes as %q and then as %q, %v", b, r1, v, v2, err)
		}
	}
	v, err := encode(generated)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(v)
	if err != nil {
		t.Fatalf("%q does not decode: %v", v, err)
	}
	if v2, _ := encode(got); !bytes.Equal(v2, v) {
		t.Fatalf("round trip of %q: %q", v, v2)
	}
}

func FuzzRunHeader(f *testing.F) {
	v, _ := encodeRun(ledger.RunRecord{Run: ledger.Run{ID: "r", Status: ledger.RunRunning, Revision: 1, Goal: "g",
		CreatedAt: time.Date(2026, 12, 2, 1, 2, 3, 4, time.UTC)}, Rows: 3, Audit: true, AuditSeq: 9})
	f.Add(v)
	f.Add([]byte(`{"run_id":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g := gen{b: b}
		r := ledger.RunRecord{Run: ledger.Run{ID: g.text(), Status: ledger.RunStatus(g.text()), Revision: g.int(), Goal: g.text(),
			Policy: g.text(), PlanHash: g.text(), CreatedAt: g.time(), UpdatedAt: g.time(), Error: g.text(), PausedBy: g.text(),
			CreatedBy: g.text(), AuditHash: g.text()}, Rows: g.int(), RevHash: g.text(), Audit: g.bool(), AuditSeq: uint64(g.int())}
		fuzzJSON(t, b, decodeRun, encodeRun, r)
	})
}

func FuzzBudgetRecord(f *testing.F) {
	f.Add([]byte(`{"id":"b1","budget":"spend","scope":"run:r","used":"12.5","count":2,"limit":"100","updated_at":"2026-12-02T01:02:03Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g := gen{b: b}
		r := ledger.BudgetRecord{ID: g.text(), Budget: g.text(), Scope: g.text(), Window: g.time(), Every: time.Duration(g.int()),
			Group: g.text(), Used: g.text(), Count: g.int(), Limit: g.text(), UpdatedAt: g.time()}
		fuzzJSON(t, b, decodeBudget, encodeBudget, r)
	})
}

func FuzzHold(f *testing.F) {
	f.Add([]byte(`{"key":"k","run_id":"r","action_id":"a","charges":[{"bucket":"b1","budget":"spend","amount":"1"}],"at":"2026-12-02T01:02:03Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g := gen{b: b}
		h := ledger.Hold{Key: g.text(), RunID: g.text(), ActionID: g.text(), At: g.time(), Released: g.bool(), ReleasedAt: g.time()}
		for range int(g.byte() % 3) {
			h.Charges = append(h.Charges, ledger.HoldCharge{Bucket: g.text(), Budget: g.text(), Amount: g.text(), Over: g.bool()})
		}
		fuzzJSON(t, b, decodeHold, encodeHold, h)
	})
}
