package badgerdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// raw returns the stored value of a Badger key (nil: none).
func raw(t *testing.T, l *Ledger, k []byte) []byte {
	t.Helper()
	var v []byte
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if err == badger.ErrKeyNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// version returns the Badger version of a key's stored value (0: none).
func version(t *testing.T, l *Ledger, k []byte) uint64 {
	t.Helper()
	var v uint64
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if err == nil {
			v = item.Version()
		}
		if err == badger.ErrKeyNotFound {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRecords: a new directory has format "3"; an executor-derived key is
// stored in Badger keys as its 32 bytes and any other key as its text; a
// key record holds its args and decodes alone (with its Badger key, without
// its row), and is not rewritten when its row moves to another key; a plan
// whose actions are its rows is stored without them; everything reads back
// as it was given, also after a reopen.
func TestRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openLarge(t, dir)
	if got := string(raw(t, l, metaFormatKey)); got != formatVersion || formatVersion != "3" {
		t.Fatalf("a new directory has format %q", got)
	}
	p := &plan.Plan{Goal: "g", Meta: map[string]string{"model": "m"}, CreatedAt: time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC),
		Transcript: json.RawMessage(`[{"tool":"read","out":1}]`), Actions: []plan.Action{
			{ID: "a1", Tool: "pay", Args: json.RawMessage(`{"n": 1, "s": "x"}`), Why: "because"},
			{ID: "a2", Tool: "mail", Args: json.RawMessage(`{"to":"${a1.output.id}"}`), DependsOn: []string{"a1"}},
			{ID: "a3", Tool: "pay", Args: json.RawMessage(`{}`)},
		}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	if v := raw(t, l, planKey("r", 1)); bytes.Contains(v, []byte("mail")) {
		t.Fatalf("plan record %q: want its actions left to the rows", v)
	} else if pr, err := decodePlanRec(v); err != nil || !pr.inRows || !reflect.DeepEqual(pr.whys, []string{"because", "", ""}) {
		t.Fatalf("plan record %q: %+v, %v", v, pr, err)
	}
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan := func(l *Ledger) {
		t.Helper()
		got, err := l.Plan(ctx, "r", 1)
		if err != nil {
			t.Fatal(err)
		}
		gotJSON, _ := json.Marshal(got)
		if !bytes.Equal(gotJSON, want) {
			t.Fatalf("plan read back:\n got  %s\n want %s", gotJSON, want)
		}
		h1, _ := plan.Hash(p)
		h2, _ := plan.Hash(got)
		if h1 != h2 {
			t.Fatalf("plan hash %s read back as %s", h1, h2)
		}
	}
	checkPlan(l)

	args1 := json.RawMessage(`{"n":1,"s":"x"}`)
	k1, _ := plan.Key("r", "a1", "pay", args1)
	if res := apply1(t, l, ledger.Claim("r", "a1", "pay", k1, args1, 1)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if raw(t, l, append(runPrefix(kindKeyRec, "r"), k1...)) != nil || raw(t, l, simpleKey(kindKeyIdx, k1)) != nil {
		t.Fatal("a dk1 key stored as its text in a Badger key")
	}
	if k := keyRecKey("r", k1); len(k) != len(runPrefix(kindKeyRec, "r"))+33 || keyFromName(k[len(k)-33:]) != k1 {
		t.Fatalf("key record's Badger key %q", k)
	}
	rec1 := raw(t, l, keyRecKey("r", k1))
	if bytes.Contains(rec1, []byte(k1)) {
		t.Fatalf("key record %q: want no copy of its key", rec1)
	}
	// Readable alone: the record and its Badger key, no row.
	if rec, err := decodeKeyRec("r", k1, rec1); err != nil || !bytes.Equal(rec.Args, args1) || rec.State != ledger.StatusClaimed {
		t.Fatalf("key record %q decoded alone: %+v, %v", rec1, rec, err)
	}
	if string(raw(t, l, keyIdxKey(k1))) != "r" {
		t.Fatal("key index")
	}
	if rec, err := l.Key(ctx, k1); err != nil || !bytes.Equal(rec.Args, args1) || rec.Key != k1 || rec.RunID != "r" {
		t.Fatalf("Key: %+v, %v", rec, err)
	}
	// The attempt fails; the action is claimed again under another key
	// (other resolved args): the first key keeps its args.
	if res := apply1(t, l, ledger.Fail(k1, 1, "no", true, nil)); res.Err != nil {
		t.Fatal(res.Err)
	}
	failed1, v1 := raw(t, l, keyRecKey("r", k1)), version(t, l, keyRecKey("r", k1))
	args2 := json.RawMessage(`{"n":2,"s":"x"}`)
	k2, _ := plan.Key("r", "a1", "pay", args2)
	if res := apply1(t, l, ledger.Claim("r", "a1", "pay", k2, args2, 1)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if v := version(t, l, keyRecKey("r", k1)); v != v1 || !bytes.Equal(raw(t, l, keyRecKey("r", k1)), failed1) {
		t.Fatalf("key record of a key its row moved away from: rewritten (version %d, was %d)", v, v1)
	}
	// A key that is not the executor's derivation is stored as its text.
	k3 := "client-key-1"
	if res := apply1(t, l, ledger.Claim("r", "a3", "pay", k3, json.RawMessage(`{}`), 1)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := apply1(t, l, ledger.Succeed(k3, 1, json.RawMessage(`{"id":3}`))); res.Err != nil {
		t.Fatal(res.Err)
	}
	if raw(t, l, append(runPrefix(kindKeyRec, "r"), k3...)) == nil || raw(t, l, simpleKey(kindKeyIdx, k3)) == nil {
		t.Fatal("a client's key not stored as its text")
	}
	check := func(l *Ledger) {
		t.Helper()
		for k, args := range map[string]json.RawMessage{k1: args1, k2: args2, k3: json.RawMessage(`{}`)} {
			if rec, err := l.Key(ctx, k); err != nil || !bytes.Equal(rec.Args, args) || rec.Key != k {
				t.Fatalf("Key(%s): %+v, %v", k, rec, err)
			}
		}
		acts, err := l.Actions(ctx, "r")
		if err != nil || len(acts) != 3 || acts[0].Key != k2 || acts[0].Status != ledger.StatusClaimed ||
			!bytes.Equal(acts[0].Args, args2) || acts[2].Key != k3 || string(acts[2].Output) != `{"id":3}` ||
			acts[1].Key != "" || !reflect.DeepEqual(acts[1].DependsOn, []string{"a1"}) || acts[1].Tool != "mail" {
			t.Fatalf("Actions: %+v, %v", acts, err)
		}
		checkPlan(l)
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLarge(t, dir)
	defer l.Close()
	check(l)
	// Rows passed by the caller that are not the plan's actions: the plan
	// keeps them.
	p2 := &plan.Plan{Goal: "g2", Actions: []plan.Action{{ID: "b1", Tool: "t", Args: json.RawMessage(`{"x":1}`)}}}
	rows := []ledger.Action{{ID: "b1", Tool: "t", Class: "keyed", Args: json.RawMessage(`{"x":2}`), Status: ledger.StatusApproved}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r2"}, p2, rows); err != nil {
		t.Fatal(err)
	}
	if pr, err := decodePlanRec(raw(t, l, planKey("r2", 1))); err != nil || pr.inRows {
		t.Fatalf("plan record %+v, %v: its actions are not its rows", pr, err)
	}
	if got, err := l.Plan(ctx, "r2", 1); err != nil || string(got.Actions[0].Args) != `{"x":1}` {
		t.Fatalf("Plan: %+v, %v", got, err)
	}
}

// TestEventHashes: every event of a chained run holds its whole audit hash
// and decodes alone (its record and its Badger key); reading from any point
// gives every event its hash, the chain verifies, and an event edited in the
// files is reported at its own seq.
func TestEventHashes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openLarge(t, dir)
	const n = 150
	p := &plan.Plan{Goal: "g"}
	for i := range n {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(`{}`)})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if res := apply1(t, l, ledger.Approve("r", fmt.Sprintf("a%d", i), nil, "bob")); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	all, err := l.Events(ctx, "r", 0, 0)
	if err != nil || len(all) < n {
		t.Fatalf("%d events, %v", len(all), err)
	}
	run, err := l.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if chained, err := ledger.VerifyChain("r", all, run.AuditHash); !chained || err != nil {
		t.Fatalf("chain: %v %v", chained, err)
	}
	for _, ev := range all {
		if len(ev.Hash) != len("sha256:")+64 {
			t.Fatalf("event %d hash %q", ev.Seq, ev.Hash)
		}
		alone, err := decodeEvent("r", ev.Seq, raw(t, l, eventKey("r", ev.Seq)))
		if err != nil || !reflect.DeepEqual(alone, ev) {
			t.Fatalf("event %d decoded alone: %+v, %v; want %+v", ev.Seq, alone, err, ev)
		}
	}
	for _, after := range []uint64{0, 1, 62, 63, 64, 65, 100, 127, 128, 129, uint64(len(all)) - 1} {
		for _, limit := range []int{0, 1, 70} {
			got, err := l.Events(ctx, "r", after, limit)
			want := all[after:]
			if limit > 0 && len(want) > limit {
				want = want[:limit]
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("Events after %d limit %d: %d events, %v", after, limit, len(got), err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Someone edits the data of an event, then of another: each is reported
	// at its seq.
	for _, seq := range []uint64{70, 64} {
		db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		k := eventKey("r", seq)
		err = db.Update(func(txn *badger.Txn) error {
			item, err := txn.Get(k)
			if err != nil {
				return err
			}
			v, _ := item.ValueCopy(nil)
			if !bytes.Contains(v, []byte("bob")) {
				return fmt.Errorf("event %d: %q", seq, v)
			}
			return txn.Set(k, bytes.Replace(v, []byte("bob"), []byte("eve"), 1))
		})
		if err := errors.Join(err, db.Close()); err != nil {
			t.Fatal(err)
		}
		l = openLarge(t, dir)
		evs, err := l.Events(ctx, "r", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ledger.VerifyChain("r", evs, run.AuditHash)
		var ce *ledger.ChainError
		if !errors.As(err, &ce) || ce.Seq != seq {
			t.Fatalf("edit of event %d: %v", seq, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
