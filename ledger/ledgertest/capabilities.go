package ledgertest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// capability is an optional interface of ledger (capability.go): whether a
// store implements it, and the contract a store that does must keep.
type capability struct {
	name     string
	has      func(ledger.Store) bool
	contract func(t *testing.T, open Opener, opts Options)
}

var capabilities = []capability{
	{"ledger.Backuper", is[ledger.Backuper], testBackuper},
	{"ledger.BudgetReader", is[ledger.BudgetReader], testBudgetReader},
	{"ledger.Collector", is[ledger.Collector], testCollector},
	{"ledger.LeaseHolder", is[ledger.LeaseHolder], testLeaseHolder},
	{"ledger.LeaseReader", is[ledger.LeaseReader], testLeaseReader},
	{"ledger.Reserver", is[ledger.Reserver], testReserver},
	{"ledger.SessionKeeper", is[ledger.SessionKeeper], testSessionKeeper},
	{"ledger.ScheduleKeeper", is[ledger.ScheduleKeeper], testScheduleKeeper},
}

func is[T any](s ledger.Store) bool {
	_, ok := s.(T)
	return ok
}

// testCapabilities logs which optional interfaces the store implements and
// runs the contract of each one it does.
func testCapabilities(t *testing.T, open Opener, opts Options) {
	l := open(t, newConfig(t))
	var table strings.Builder
	fmt.Fprintf(&table, "capabilities of %T:\n", l)
	for _, c := range capabilities {
		mark := "no"
		if c.has(l) {
			mark = "yes"
		}
		fmt.Fprintf(&table, "  %-22s %s\n", c.name, mark)
	}
	t.Log(table.String())
	for _, c := range capabilities {
		t.Run(strings.TrimPrefix(c.name, "ledger."), func(t *testing.T) {
			if !c.has(l) {
				t.Skipf("%T does not implement %s", l, c.name)
			}
			c.contract(t, open, opts)
		})
	}
}

// testBackuper: a store with a run writes a backup of it without error.
func testBackuper(t *testing.T, open Opener, _ Options) {
	b := setup(t, open)
	b.createRun(t, "r", 2)
	var buf bytes.Buffer
	if err := b.l.(ledger.Backuper).Backup(b.ctx, &buf); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if buf.Len() == 0 {
		t.Fatal("Backup wrote nothing")
	}
}

// testBudgetReader: a store that reserved nothing has no buckets, and an
// unknown bucket or hold is ErrNotFound.
func testBudgetReader(t *testing.T, open Opener, _ Options) {
	b := setup(t, open)
	br := b.l.(ledger.BudgetReader)
	if all, err := br.Budgets(b.ctx); err != nil || len(all) != 0 {
		t.Fatalf("Budgets of a new store = %v, %v; want none", all, err)
	}
	if _, err := br.Budget(b.ctx, "no-such-bucket"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Budget(unknown) = %v; want ErrNotFound", err)
	}
	if _, err := br.Hold(b.ctx, "no-such-key"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Hold(unknown) = %v; want ErrNotFound", err)
	}
}

// testLeaseHolder: a handle that was just opened holds a valid lease.
func testLeaseHolder(t *testing.T, open Opener, _ Options) {
	b := setup(t, open)
	if !b.l.(ledger.LeaseHolder).LeaseValid() {
		t.Fatal("LeaseValid() = false on a handle just opened")
	}
}

// testLeaseReader: a handle's own lease reads as live, an unknown
// incarnation is ErrNotFound, and on a durable store a second handle reads
// the first's lease, which ends (not live) once the first is closed.
func testLeaseReader(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	lr := b.l.(ledger.LeaseReader)
	own, err := lr.Lease(b.ctx, b.l.Incarnation())
	if err != nil || own.Incarnation != b.l.Incarnation() || !own.Live() || own.Left() <= 0 {
		t.Fatalf("own lease: %+v (live %v, left %v), %v", own, own.Live(), own.Left(), err)
	}
	if l, err := lr.Lease(b.ctx, "no-such-incarnation"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("lease of an unknown incarnation: %+v, %v; want ErrNotFound", l, err)
	}
	if !opts.Durable {
		return
	}
	other := open(t, b.cfg)
	first := b.l.Incarnation()
	if l, err := other.(ledger.LeaseReader).Lease(b.ctx, first); err != nil || !l.Live() {
		t.Fatalf("the first handle's lease read by a second: %+v, %v", l, err)
	}
	b.l.Close()
	if l, err := other.(ledger.LeaseReader).Lease(b.ctx, first); err != nil || l.Live() || l.Left() != 0 {
		t.Fatalf("the lease of a closed handle: %+v (live %v), %v", l, l.Live(), err)
	}
}

// testReserver: a name is held until released; on a durable store, a
// second handle on the same ledger cannot take it while the first holds
// it, and can once it is released.
func testReserver(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	rs := b.l.(ledger.Reserver)
	release, ok, err := rs.Reserve(b.ctx, "run:r")
	if err != nil || !ok || release == nil {
		t.Fatalf("Reserve(run:r) = ok %v, %v; want held", ok, err)
	}
	if opts.Durable {
		other := open(t, b.cfg).(ledger.Reserver)
		if _, ok, err := other.Reserve(b.ctx, "run:r"); err != nil || ok {
			t.Fatalf("a second handle reserved what the first holds: ok %v, %v", ok, err)
		}
		release()
		release() // a second call does nothing
		rel2, ok, err := other.Reserve(b.ctx, "run:r")
		if err != nil || !ok {
			t.Fatalf("the second handle reserving after release = ok %v, %v; want held", ok, err)
		}
		if _, ok, err := rs.Reserve(b.ctx, "run:r"); err != nil || ok {
			t.Fatalf("the first handle reserved what the second holds: ok %v, %v", ok, err)
		}
		rel2()
		return
	}
	release()
	release()
	rel, ok, err := rs.Reserve(b.ctx, "run:r")
	if err != nil || !ok {
		t.Fatalf("Reserve after release = ok %v, %v; want held", ok, err)
	}
	rel()
}

// testSessionKeeper: a session put is returned as put (on a durable store,
// by a second handle on the same ledger too), replaced by a second put,
// and gone once deleted; an unknown one is not found, without error.
func testSessionKeeper(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	sk := b.l.(ledger.SessionKeeper)
	reader := sk
	if opts.Durable {
		reader = open(t, b.cfg).(ledger.SessionKeeper)
	}
	const hash = "5e55"
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	get := func(want string, wantExp time.Time, wantOK bool) {
		t.Helper()
		name, exp, ok, err := reader.Session(b.ctx, hash)
		if err != nil || ok != wantOK || name != want || (ok && !exp.Equal(wantExp)) {
			t.Fatalf("Session = %q, %v, ok %v, %v; want %q, %v, ok %v", name, exp, ok, err, want, wantExp, wantOK)
		}
	}
	get("", time.Time{}, false)
	if err := sk.PutSession(b.ctx, hash, "alice", expires); err != nil {
		t.Fatalf("PutSession: %v", err)
	}
	get("alice", expires, true)
	later := expires.Add(time.Hour)
	if err := sk.PutSession(b.ctx, hash, "bob", later); err != nil {
		t.Fatalf("PutSession again: %v", err)
	}
	get("bob", later, true)
	if err := sk.DeleteSession(b.ctx, hash); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	get("", time.Time{}, false)
	if err := sk.DeleteSession(b.ctx, hash); err != nil {
		t.Fatalf("DeleteSession of a deleted session: %v", err)
	}
}
