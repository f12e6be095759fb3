package ledgertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
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
	{"ledger.DocApplier", is[ledger.DocApplier], testDocApplier},
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

// testDocApplier: ApplyDoc's document is the run as its commit left it (its
// writes in, large args resolved), the same as a Doc read after; an op that
// fails leaves the commit and the document; a refused Apply has none; and
// concurrent ApplyDocs (committed together where the store groups them)
// each get their own run's.
func testDocApplier(t *testing.T, open Opener, _ Options) {
	b := setup(t, open)
	da := b.l.(ledger.DocApplier)
	large := json.RawMessage(`{"blob":` + string(bigString(200<<10)) + `}`)
	p := &plan.Plan{Goal: "doc", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: large}, {ID: "a2", Tool: "t", Args: json.RawMessage(`{"i":2}`)}}}
	if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "r"}, p, []ledger.Action{
		{ID: "a1", Tool: "t", Args: large, Status: ledger.StatusApproved},
		{ID: "a2", Tool: "t", Args: json.RawMessage(`{"i":2}`), Status: ledger.StatusApproved}}); err != nil {
		t.Fatal(err)
	}
	k1, k2 := key(t, "r", "a1", string(large)), key(t, "r", "a2", `{"i":2}`)
	b.mustOK(t, ledger.Claim("r", "a1", "t", k1, large, 1))
	asRead := func(what string, got ledger.RunDoc) {
		t.Helper()
		want, err := b.l.Doc(b.ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: ApplyDoc's document differs from Doc's read after it:\n got  %+v\n want %+v", what, got, want)
		}
	}

	res, doc, err := da.ApplyDoc(b.ctx, "r", ledger.Succeed(k1, 1, json.RawMessage(`{"ok":1}`)), ledger.Claim("r", "a2", "t", k2, json.RawMessage(`{"i":2}`), 1))
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("ApplyDoc: %v %+v", err, res)
	}
	if len(doc.Actions) != 2 || doc.Actions[0].Status != ledger.StatusSucceeded || string(doc.Actions[0].Output) != `{"ok":1}` ||
		!bytes.Equal(doc.Actions[0].Args, large) || doc.Actions[1].Status != ledger.StatusClaimed {
		t.Fatalf("ApplyDoc's document misses its own writes: %+v", doc.Actions)
	}
	asRead("succeed and claim", doc)

	// An op that fails: the others commit, and the document shows them.
	res, doc, err = da.ApplyDoc(b.ctx, "r", ledger.Succeed(k2, 7, json.RawMessage(`{}`)), ledger.Succeed(k2, 1, json.RawMessage(`{"ok":2}`)),
		ledger.SetRunStatus("r", ledger.RunCompleted, ledger.EventRunCompleted, "", nil))
	if err != nil || res[0].Err == nil || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("ApplyDoc: %v %+v (want the first op refused, the others through)", err, res)
	}
	if doc.Run.Status != ledger.RunCompleted || doc.Actions[1].Status != ledger.StatusSucceeded {
		t.Fatalf("document after a partly refused Apply: run %s, a2 %s", doc.Run.Status, doc.Actions[1].Status)
	}
	asRead("completion", doc)

	// A refused Apply commits nothing and has no document.
	if _, doc, err := da.ApplyDoc(b.ctx, "r", ledger.Op{}); !errors.Is(err, ledger.ErrInvalid) || doc.Run.ID != "" {
		t.Fatalf("ApplyDoc of an invalid op: %v, document of %q", err, doc.Run.ID)
	}

	// Concurrent ApplyDocs on runs of their own.
	const n = 8
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		b.createRun(t, id, 3)
	}
	errs := make(chan error, n)
	for i := range n {
		go func() {
			id := fmt.Sprintf("c%d", i)
			for j := 1; j <= 3; j++ {
				aid := fmt.Sprintf("a%d", j)
				args := fmt.Sprintf(`{"i":%d}`, j)
				k := key(t, id, aid, args)
				res, doc, err := da.ApplyDoc(b.ctx, id, ledger.Approve(id, aid, nil, "ann"), ledger.Claim(id, aid, "t", k, json.RawMessage(args), 1))
				if err == nil {
					err = errors.Join(res[0].Err, res[1].Err)
				}
				if err == nil && (doc.Run.ID != id || len(doc.Actions) != 3 || doc.Actions[j-1].Status != ledger.StatusClaimed || doc.Actions[j-1].Key != k) {
					err = fmt.Errorf("run %s, claim of %s: the document is of run %q with %d rows, %+v", id, aid, doc.Run.ID, len(doc.Actions), doc.Actions)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
