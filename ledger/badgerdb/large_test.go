package badgerdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// largeArgs is a JSON object of about n bytes whose text contains marker
// exactly once, so that a scan of the store can count its copies.
func largeArgs(marker string, n int) json.RawMessage {
	return json.RawMessage(`{"marker": "` + marker + `", "blob": "` + strings.Repeat("x", n) + `"}`)
}

// copiesIn counts the stored values (every key of the store) that contain
// marker, and sums the bytes of all values.
func copiesIn(t *testing.T, l *Ledger, marker string) (copies map[string]int, valueBytes int64) {
	t.Helper()
	copies = map[string]int{}
	err := l.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			kind := string(it.Item().Key()[:1])
			err := it.Item().Value(func(v []byte) error {
				valueBytes += int64(len(v))
				if bytes.Contains(v, []byte(marker)) {
					copies[kind]++
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return copies, valueBytes
}

func openLarge(t *testing.T, dir string) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func apply1(t *testing.T, l *Ledger, o ledger.Op) ledger.Result {
	t.Helper()
	res, err := l.Apply(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestLargeArgsStoredOnce: one pre-approved action with a 1 MiB argument,
// claimed and succeeded, leaves exactly one copy of the argument in the store
// (the blob that the plan, the rows and the key record refer to), and every
// reader gets the bytes back. Before large values were stored once, the
// plan, the revision's rows, the row record and the key record each held
// copies (approved args too): about 5 MiB of values for 1 MiB of argument.
func TestLargeArgsStoredOnce(t *testing.T) {
	ctx := context.Background()
	l := openLarge(t, t.TempDir())
	defer func() { l.Close() }()
	const marker = "only-once-7f3c"
	args := largeArgs(marker, 1<<20)
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a", Tool: "t", Args: args}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r"}, p, []ledger.Action{{ID: "a", Tool: "t", Args: args, Status: ledger.StatusApproved}}); err != nil {
		t.Fatal(err)
	}
	key, err := plan.Key("r", "a", "t", args)
	if err != nil {
		t.Fatal(err)
	}
	claim := apply1(t, l, ledger.Claim("r", "a", "t", key, args, 1))
	if claim.Err != nil {
		t.Fatal(claim.Err)
	}
	if !jsonEqual(claim.Action.Args, args) || !jsonEqual(claim.Key.Args, args) || !jsonEqual(claim.Action.ApprovedArgs, args) {
		t.Fatalf("the claim's result does not carry the args (%d, %d, %d bytes)", len(claim.Action.Args), len(claim.Key.Args), len(claim.Action.ApprovedArgs))
	}
	if res := apply1(t, l, ledger.Succeed(key, 1, json.RawMessage(`{"ok": true}`))); res.Err != nil || !jsonEqual(res.Action.Args, args) || !jsonEqual(res.Key.Args, args) {
		t.Fatalf("succeed: %v, args %d/%d bytes", res.Err, len(res.Action.Args), len(res.Key.Args))
	}
	// A second claim conflicts with the succeeded record, which carries the args.
	res := apply1(t, l, ledger.Claim("r", "a", "t", key, args, 2))
	var ce *ledger.ConflictError
	if !errors.As(res.Err, &ce) || !jsonEqual(ce.Current.Args, args) {
		t.Fatalf("claim of a succeeded key: %v (current args %d bytes)", res.Err, len(ce.Current.Args))
	}

	copies, total := copiesIn(t, l, marker)
	if copies["c"] != 1 || len(copies) != 1 {
		t.Errorf("copies of the argument by record kind: %v; want one blob (c) and nothing else", copies)
	}
	if max := int64(len(args)) + 64<<10; total > max {
		t.Errorf("%d bytes of values for a %d-byte argument; want at most %d", total, len(args), max)
	}

	checkReads := func(when string) {
		t.Helper()
		acts, err := l.Actions(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(acts[0].Args, args) || !jsonEqual(acts[0].ApprovedArgs, args) || acts[0].Status != ledger.StatusSucceeded {
			t.Errorf("%s: Actions: status %s, args %d bytes, approved args %d bytes", when, acts[0].Status, len(acts[0].Args), len(acts[0].ApprovedArgs))
		}
		rec, err := l.Key(ctx, key)
		if err != nil || !jsonEqual(rec.Args, args) {
			t.Errorf("%s: Key: %v, args %d bytes", when, err, len(rec.Args))
		}
		got, err := l.Plan(ctx, "r", 1)
		if err != nil || len(got.Actions) != 1 || !jsonEqual(got.Actions[0].Args, args) {
			t.Fatalf("%s: Plan: %v", when, err)
		}
		if h1, _ := plan.Hash(p); func() string { h2, _ := plan.Hash(got); return h2 }() != h1 {
			t.Errorf("%s: the plan read back hashes differently", when)
		}
		d, err := l.Doc(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(d.Actions[0].Args, args) {
			t.Errorf("%s: Doc args %d bytes", when, len(d.Actions[0].Args))
		}
	}
	checkReads("open")
	dir := l.cfg.Dir
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLarge(t, dir)
	checkReads("reopened")
}

// TestLargeArgsEditedAndApproved: edits and approvals of large args compare
// by value (an identical repeat writes nothing), keep one blob per distinct
// value, and the action.edited event does not inline args of 64 KiB or more.
func TestLargeArgsEditedAndApproved(t *testing.T) {
	ctx := context.Background()
	l := openLarge(t, t.TempDir())
	defer l.Close()
	small := json.RawMessage(`{"n": 1}`)
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a", Tool: "t", Args: small}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r"}, p, nil); err != nil {
		t.Fatal(err)
	}
	const marker = "edited-91ab"
	big := largeArgs(marker, 256<<10)
	for i := 0; i < 2; i++ {
		if res := apply1(t, l, ledger.Edit("r", "a", big, "ann")); res.Err != nil || !bytes.Equal(res.Action.Args, big) {
			t.Fatalf("edit %d: %v", i, res.Err)
		}
		if res := apply1(t, l, ledger.Approve("r", "a", nil, "ann")); res.Err != nil || !bytes.Equal(res.Action.ApprovedArgs, big) {
			t.Fatalf("approve %d: %v", i, res.Err)
		}
	}
	// The same value in other bytes (indented) is the same args.
	var indented bytes.Buffer
	if err := json.Indent(&indented, big, "", "  "); err != nil {
		t.Fatal(err)
	}
	if res := apply1(t, l, ledger.Approve("r", "a", indented.Bytes(), "ann")); res.Err != nil {
		t.Fatal(res.Err)
	}
	evs, err := l.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var edited, approved int
	for _, e := range evs {
		switch e.Type {
		case "action.edited":
			edited++
			if string(e.Data) != `{"args_truncated":true,"by":"ann"}` {
				t.Errorf("action.edited data: %.200s", e.Data)
			}
		case "action.approved":
			approved++
		}
	}
	if edited != 1 || approved != 1 {
		t.Errorf("%d action.edited and %d action.approved events; the repeats are identical, want 1 and 1", edited, approved)
	}
	if copies, _ := copiesIn(t, l, marker); copies["c"] != 1 || len(copies) != 1 {
		t.Errorf("copies of the edited args by record kind: %v; want one blob", copies)
	}
	// Small args are still inlined in the event.
	if res := apply1(t, l, ledger.Edit("r", "a", small, "bob")); res.Err != nil {
		t.Fatal(res.Err)
	}
	evs, _ = l.Events(ctx, "r", evs[len(evs)-1].Seq, 0)
	if len(evs) != 1 || string(evs[0].Data) != `{"args":{"n": 1},"by":"bob"}` {
		t.Errorf("edit back to small args: %v", evs)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
