package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
)

// editBadger changes, in the ledger's Badger directory, the record of the
// first event of type eventType whose data holds old (or whose type is
// old) to hold new instead, or removes it (drop): what someone with write
// access to the files could do. The event is found through the ledger, its
// record by its Badger key (ledger/badgerdb: e\0<run>\0<seq BE8>); the
// record must hold old's bytes (event records store their type as a code).
func editBadger(t *testing.T, dir, eventType, old, new string, drop bool) {
	t.Helper()
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var runID string
	var seq uint64
	runs, _, err := l.ListRuns(context.Background(), ledger.ListOptions{Limit: 1000})
	for _, r := range runs {
		evs, err := l.Events(context.Background(), r.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if string(ev.Type) == eventType && (bytes.Contains(ev.Data, []byte(old)) || old == eventType) && seq == 0 {
				runID, seq = r.ID, ev.Seq
			}
		}
	}
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil || seq == 0 {
		t.Fatalf("finding the %s event holding %s: %v (found: %v)", eventType, old, err, seq != 0)
	}
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k := binary.BigEndian.AppendUint64(append(append([]byte{'e', 0}, runID...), 0), seq)
	err = db.Update(func(txn *badger.Txn) error {
		if drop {
			return txn.Delete(k)
		}
		item, err := txn.Get(k)
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if !bytes.Contains(v, []byte(old)) {
			return fmt.Errorf("the record of event %d does not hold %s: %q", seq, old, v)
		}
		return txn.Set(k, bytes.Replace(v, []byte(old), []byte(new), 1))
	})
	if err != nil {
		t.Fatalf("editing the ledger: %v", err)
	}
}

// TestAuditVerify: docket audit prints the run's history as JSON Lines and
// --verify holds on an untouched ledger; an event edited in the Badger files
// (an amount, an approver) or the last event removed is detected (exit 1,
// naming the event).
func TestAuditVerify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fourEyesFile(t)
	p := b.plan(t, "pay", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "au"}}]}`)
	wantCode(t, inproc(t, b.runArgs(p, "--run-id", "au", "--as", "alice")...), 3)
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "bob", "au", "pay"), 3)
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "carol", "au", "pay"), 0)

	r := inproc(t, "audit", "--data", b.data, "--verify", "au")
	wantCode(t, r, 0)
	var types []string
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var ev ledger.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Hash == "" {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		types = append(types, string(ev.Type))
	}
	all := strings.Join(types, " ")
	for _, want := range []string{"run.created", "action.approval_added", "action.approved", "action.claimed", "action.succeeded", "run.completed"} {
		if !strings.Contains(all, want) {
			t.Fatalf("history lacks %s: %s", want, all)
		}
	}
	if !strings.Contains(r.stdout, `"created_by":"cli:alice"`) || !strings.Contains(r.stdout, `"approved_by":["cli:bob","cli:carol"]`) ||
		!strings.Contains(r.stdout, `"rule":"four-eyes"`) {
		t.Fatalf("history lacks who created, who approved or the rule:\n%s", r.stdout)
	}

	// Someone rewrites who approved.
	editBadger(t, b.data, "action.approval_added", `"by":"cli:bob"`, `"by":"cli:eve"`, false)
	r = inproc(t, "audit", "--data", b.data, "--verify", "au")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "audit chain is broken at event") {
		t.Fatalf("edit not detected:\n%s", r)
	}
	wantCode(t, inproc(t, "audit", "--data", b.data, "au"), 0) // without --verify it only prints
}

// TestAuditCutOff: the last event removed from the files is detected by the
// run record's head.
func TestAuditCutOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.plan(t, "pay", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 10, "currency": "EUR", "reference": "cut"}}]}`)
	wantCode(t, inproc(t, b.runArgs(p, "--run-id", "cut", "--approve", "all")...), 0)
	wantCode(t, inproc(t, "audit", "--data", b.data, "--verify", "cut"), 0)
	editBadger(t, b.data, "run.completed", "run.completed", "", true)
	r := inproc(t, "audit", "--data", b.data, "--verify", "cut")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "last hash") {
		t.Fatalf("cut-off not detected:\n%s", r)
	}
}

// TestAuditAndDryRunThroughServer: docket audit --server verifies the chain
// itself (from the events the service serves and its head), and docket
// replay --dry-run --server previews through POST /v1/runs/{id}/replay.
func TestAuditAndDryRunThroughServer(t *testing.T) {
	s := startServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"))
	var doc struct {
		Status string `json:"status"`
	}
	if code := s.post(t, "/v1/runs", map[string]any{"run_id": "srv-audit", "plan": json.RawMessage(demoworld.OnboardingPlan()), "approve": "all"}, &doc); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d", code)
	}
	r := inproc(t, "audit", "--server", s.base, "--token", s.token, "--verify", "srv-audit")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"type":"run.created"`) || !strings.Contains(r.stderr, "hash chain verified") {
		t.Fatalf("remote audit:\n%s", r)
	}
	planPath := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planPath, demoworld.OnboardingPlan(), 0o600); err != nil {
		t.Fatal(err)
	}
	r = inproc(t, "replay", "--server", s.base, "--token", s.token, "--plan", planPath, "--dry-run", "srv-audit")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"dry_run": true`) || !strings.Contains(r.stdout, `"outcome"`) {
		t.Fatalf("remote dry run:\n%s", r)
	}
}
