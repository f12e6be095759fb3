package badgerdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
