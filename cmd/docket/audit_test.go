package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger"
)

// editBadger changes, in the ledger's Badger directory, the first value
// holding old (an event's record, found by its type) to hold new instead:
// what someone with write access to the files could do.
func editBadger(t *testing.T, dir, eventType, old, new string, drop bool) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := false
	err = db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid() && !done; it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			// An event record holds its type as JSON metadata (records of
			// older directories) or, in the binary encoding of events
			// (ledger/badgerdb/eventenc.go, key kind 'e'), length-prefixed.
			binaryType := append([]byte{byte(len(eventType))}, eventType...)
			isEvent := bytes.Contains(v, []byte(`"type":"`+eventType+`"`)) ||
				(it.Item().Key()[0] == 'e' && bytes.Contains(v, binaryType))
			if !isEvent || !bytes.Contains(v, []byte(old)) {
				continue
			}
			k := it.Item().KeyCopy(nil)
			done = true
			if drop {
				return txn.Delete(k)
			}
			return txn.Set(k, bytes.Replace(v, []byte(old), []byte(new), 1))
		}
		return nil
	})
	if err != nil || !done {
		t.Fatalf("editing the ledger: %v (found: %v)", err, done)
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
