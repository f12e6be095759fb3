package badgerdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// TestAckAfterSync checks, through the AfterSync/BeforeAck hooks and the
// committer's own bookkeeping, that no acknowledgement is returned before the
// sync of the commit that carried it, with many concurrent callers.
func TestAckAfterSync(t *testing.T) {
	var syncs, acks atomic.Int64
	var mu sync.Mutex
	var bad []string
	cfg := Config{
		Dir:       t.TempDir(),
		AfterSync: func() { syncs.Add(1) },
		BeforeAck: func() { acks.Add(1) },
	}
	l, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var carried atomic.Int64
	l.testAck = func(committedIn, synced uint64) {
		if committedIn == 0 {
			return
		}
		carried.Add(1)
		if committedIn > synced || int64(synced) > syncs.Load() {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("ack of commit %d with last synced commit %d (%d AfterSync calls)", committedIn, synced, syncs.Load()))
			mu.Unlock()
		}
	}
	ctx := context.Background()
	p := &plan.Plan{Goal: "g"}
	for i := 0; i < 64; i++ {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(`{}`)})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("a%d", i)
			k, _ := plan.Key("r", id, "t", json.RawMessage(`{}`))
			before := syncs.Load()
			res, err := l.Apply(ctx, ledger.Claim("r", id, "t", k, json.RawMessage(`{}`), 1))
			if err != nil || res[0].Err != nil {
				t.Errorf("claim: %v %v", err, res)
				return
			}
			if syncs.Load() <= before {
				t.Errorf("claim of %s acknowledged with no sync since it was submitted", id)
			}
			if _, err := l.Apply(ctx, ledger.Succeed(k, 1, json.RawMessage(`1`))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("acknowledged before sync:\n%v", bad)
	}
	if carried.Load() != 129 || acks.Load() != 129 {
		t.Fatalf("%d acks of writes observed, %d BeforeAck calls; want 129", carried.Load(), acks.Load())
	}
	if syncs.Load() < 2 || syncs.Load() > 129 {
		t.Fatalf("%d syncs for 129 writing requests", syncs.Load())
	}
	t.Logf("129 writing requests, %d syncs", syncs.Load())
}

func TestFormatVersion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.db.Update(func(txn *badger.Txn) error { return txn.Set(metaFormatKey, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, Config{Dir: dir}); !errors.Is(err, ledger.ErrFormat) {
		t.Fatalf("open of format 99: %v, want ledger.ErrFormat", err)
	}
	// A Badger directory that is not a docket ledger is not adopted either.
	other := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(other).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("foreign"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(ctx, Config{Dir: other}); !errors.Is(err, ledger.ErrFormat) {
		t.Fatalf("open of a foreign Badger directory: %v, want ledger.ErrFormat", err)
	}
}

func TestOpenValidates(t *testing.T) {
	for _, cfg := range []Config{{}, {Dir: t.TempDir(), MemTableSize: 1}, {Dir: t.TempDir(), GCInterval: -1}} {
		if _, err := Open(context.Background(), cfg); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want ledger.ErrInvalid", cfg, err)
		}
	}
}

func TestRecordEncoding(t *testing.T) {
	rec := ledger.KeyRecord{Key: "dk1_x", RunID: "r", State: ledger.StatusSucceeded, Attempt: 2, Output: json.RawMessage(`{"a":[1,2]}`)}
	b := encodeKeyRec2(rec, 0)
	got, _, err := decodeKeyRec(rec.RunID, rec.Key, b)
	if err != nil || got.Key != rec.Key || got.Attempt != 2 || string(got.Output) != `{"a":[1,2]}` {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {2, 1, '{'}, {1, 200}, {1, 5, '{', '}'}, {encKeyRec2, 200}} {
		if _, _, err := decodeKeyRec(rec.RunID, rec.Key, bad); err == nil {
			t.Errorf("decode(%v) succeeded", bad)
		}
	}
}

func TestRowEncoding(t *testing.T) {
	rows := []ledger.RowRecord{
		{ID: "a1", Tool: "t", Class: "keyed", Key: "dk1_x", Status: ledger.StatusClaimed, Attempts: 3,
			Args: json.RawMessage(`{"a":1}`), DependsOn: []string{"a0", "b"}, Error: "e",
			ApprovedArgs: json.RawMessage(`{}`), Undo: true, Ord: 7},
		{ID: "a2", Status: ledger.StatusPending},
	}
	for _, r := range rows {
		got, err := decodeRow(encodeRow(r))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(r) {
			t.Fatalf("row round trip:\n got  %+v (%v)\n want %+v", got, err, r)
		}
	}
	got, err := decodeRows(encodeRows(rows))
	if err != nil || fmt.Sprint(got) != fmt.Sprint(rows) || got[1].Args != nil || got[1].DependsOn != nil {
		t.Fatalf("rows round trip %+v, %v", got, err)
	}
	enc := encodeRow(rows[0])
	for i := 0; i < len(enc); i++ {
		if _, err := decodeRow(enc[:i]); err == nil {
			t.Fatalf("truncated row of %d/%d bytes decoded", i, len(enc))
		}
	}
	if _, err := decodeRows([]byte{encRows, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Fatal("rows blob with a huge count decoded")
	}
}

// Rows as written now: initial rows with a table of tools and approved args
// that are the args not repeated; row records holding only what changed
// since their initial row (or everything, without one).
func TestRowEncoding2(t *testing.T) {
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
	enc := encodeRows2(initial)
	if enc[0] != encRows2 {
		t.Fatalf("rows encoded with tag %d", enc[0])
	}
	got, err := decodeRows(enc)
	if err != nil || !reflect.DeepEqual(got, initial) {
		t.Fatalf("rows round trip:\n got  %+v (%v)\n want %+v", got, err, initial)
	}
	for i := 1; i < len(enc); i++ {
		if _, err := decodeRows(enc[:i]); err == nil {
			t.Fatalf("rows cut to %d/%d bytes decoded", i, len(enc))
		}
	}
	if bytes.Count(enc, []byte(`{"n":0}`)) != 1 || bytes.Count(enc, []byte("pay")) != 1 {
		t.Fatalf("approved args that are the args, or a tool, stored twice: %q", enc)
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
		{claimed, &initial[0], 1 + 1 + 33 + 1 + 1 + 8 + 1},
		{edited, &initial[1], 0},
		{initial[2], &initial[2], 0},
		{undo, nil, 0},
	} {
		v := encodeRow2(c.r, c.base)
		if c.max > 0 && len(v) > c.max {
			t.Fatalf("row %s takes %d bytes: %q", c.r.ID, len(v), v)
		}
		got, err := decodeRowRecord(c.r.ID, v, c.base, false)
		if err != nil || !reflect.DeepEqual(got, c.r) {
			t.Fatalf("row round trip:\n got  %+v (%v)\n want %+v", got, err, c.r)
		}
		if rowNeedsBase(v) != (c.base != nil) {
			t.Fatalf("row %s: needs its initial row: %v", c.r.ID, rowNeedsBase(v))
		}
		if c.base != nil {
			if _, err := decodeRowRecord(c.r.ID, v, nil, false); err == nil {
				t.Fatalf("row %s decoded without its initial row", c.r.ID)
			}
			p, err := decodeRowRecord(c.r.ID, v, nil, true)
			if err != nil || p.Key != c.r.Key || string(p.Args) != string(c.r.Args) || p.Status != c.r.Status {
				t.Fatalf("row %s, partly: %+v, %v", c.r.ID, p, err)
			}
		}
		for i := 1; i < len(v); i++ {
			if _, err := decodeRowRecord(c.r.ID, v[:i], c.base, false); err == nil {
				t.Fatalf("row %s cut to %d/%d bytes decoded", c.r.ID, i, len(v))
			}
		}
	}
	// Records of the encoding before still read, checked against their key.
	if got, err := decodeRowRecord("a0", encodeRow(claimed), nil, false); err != nil || !reflect.DeepEqual(got, claimed) {
		t.Fatalf("old row record: %+v, %v", got, err)
	}
	if _, err := decodeRowRecord("a9", encodeRow(claimed), nil, false); err == nil {
		t.Fatal("an old row record decoded under another action id")
	}
}
