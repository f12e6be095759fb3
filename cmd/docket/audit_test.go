package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/gorilla/websocket"

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
	// The preview is of the finished run: wait for its drive to end (a
	// preview while an action is in flight is refused with 409).
	req, _ := http.NewRequest("GET", s.base+"/v1/runs/srv-audit?wait=5m", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"status":"completed"`) {
		t.Fatalf("GET the run, waiting: %d %.300s", resp.StatusCode, raw)
	}
	r = inproc(t, "replay", "--server", s.base, "--token", s.token, "--plan", planPath, "--dry-run", "srv-audit")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"dry_run": true`) || !strings.Contains(r.stdout, `"outcome"`) {
		t.Fatalf("remote dry run:\n%s", r)
	}
}

// shapedBody is a JSON answer in shapes a re-encoding would change:
// whitespace and line breaks between tokens, unsorted keys, "\u00e9" and
// "\/" escapes, raw "<", "&" and U+2028, exponent and long numbers, nested
// objects.
const shapedBody = "{ \"z\": 1e2,  \"a\" : \"caf\\u00e9 <b>&amp; \\/\",\n" +
	"  \"big\": 123456789012345678901234567890, \"neg\": -0.50,\n" +
	"\t\"nested\": {\"y\": [1, 2.50, -0], \"x\": {\"k2\": true, \"k1\": null}},\r\n" +
	"  \"uni\": \"é\u2028ü\" }"

// shapedRun records, in a new data directory, run "shaped" whose tool
// answered shapedBody (its output is the answer as it came) and whose
// args hold the same shapes but the big number (a plan refuses numbers
// beyond 2^53); it returns the data directory and tools file.
func shapedRun(t *testing.T, ledgerArgs ...string) (data, toolsPath string) {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, shapedBody)
	}))
	t.Cleanup(api.Close)
	dir := t.TempDir()
	data, toolsPath = filepath.Join(dir, "data"), filepath.Join(dir, "tools.json")
	tf := `{"version": 1, "tools": [{"name": "shapes", "description": "Answer JSON of many shapes.", "effect": "read_only",
		"input_schema": {"type": "object", "properties": {"q": {"type": "object"}}, "required": ["q"]},
		"request": {"method": "GET", "url": "` + api.URL + `/shapes"}, "timeout": "5s"}]}`
	planPath := filepath.Join(dir, "plan.json")
	pl := `{"goal": "shapes", "actions": [{"id": "s", "tool": "shapes", "args": {"q": ` + strings.Replace(shapedBody, "123456789012345678901234567890", "12345", 1) + `}}]}`
	for p, b := range map[string]string{toolsPath: tf, planPath: pl} {
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if len(ledgerArgs) == 0 {
		ledgerArgs = []string{"--data", data}
	}
	wantCode(t, inproc(t, append([]string{"run", "--tools", toolsPath, "--plan", planPath, "--run-id", "shaped", "--approve", "all"}, ledgerArgs...)...), 0)
	return data, toolsPath
}

// TestAuditVerifyThroughServerStoredBytes: docket audit --server --verify
// holds on an untouched run whose events carry data in shapes the service's
// JSON would re-encode (the service serves each event's data as the ledger
// holds it), and still reports an event edited in the files: a changed
// number, and a change of whitespace alone.
func TestAuditVerifyThroughServerStoredBytes(t *testing.T) {
	t.Parallel()
	data, toolsPath := shapedRun(t)
	wantCode(t, inproc(t, "audit", "--data", data, "--verify", "shaped"), 0)

	s := startServe(t, nil, "--data", data, "--tools", toolsPath)
	r := inproc(t, "audit", "--server", s.base, "--token", s.token, "--verify", "shaped")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "hash chain verified") {
		t.Fatalf("remote audit:\n%s", r)
	}
	checkAuditLines(t, r.stdout)
	// On the wire: the events page and the run's WebSocket carry the
	// output as the tool answered it; the audit download has it on one line.
	if body := s.getRaw(t, "/v1/runs/shaped/events"); !strings.Contains(body, `"data":{"output":`+shapedBody+`}`) {
		t.Fatalf("GET /v1/runs/shaped/events does not carry the stored bytes:\n%s", body)
	}
	var frame string
	for m := range streamRunRaw(t, s.base, s.token, "shaped") {
		if strings.Contains(m, `"type":"action.succeeded"`) {
			frame = m
		}
		if strings.Contains(m, `"type":"run.completed"`) {
			break
		}
	}
	if !strings.Contains(frame, `"data":{"output":`+shapedBody+`}`) {
		t.Fatalf("the WebSocket frame does not carry the stored bytes:\n%s", frame)
	}
	checkAuditLines(t, s.getRaw(t, "/v1/runs/shaped/audit"))
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	for _, edit := range []struct{ name, old, new string }{
		{"a number", `"z": 1e2`, `"z": 1e3`},
		{"whitespace alone", `"y": [1, 2.50, -0]`, `"y": [1,2.50,  -0]`},
		{"not JSON", `"z": 1e2`, `"z": 1e?`},
	} {
		editBadger(t, data, "action.succeeded", edit.old, edit.new, false)
		r := inproc(t, "audit", "--data", data, "--verify", "shaped")
		wantCode(t, r, 1)
		if !strings.Contains(r.stderr, "audit chain is broken at event 5") {
			t.Fatalf("%s edited: not reported:\n%s", edit.name, r)
		}
		s2 := startServe(t, nil, "--data", data, "--tools", toolsPath) // the token is kept in the data directory
		r = inproc(t, "audit", "--server", s2.base, "--token", s.token, "--verify", "shaped")
		wantCode(t, r, 1)
		if !strings.Contains(r.stderr, "audit chain is broken at event 5") {
			t.Fatalf("%s edited: not reported:\n%s", edit.name, r)
		}
		if err := s2.stop(); err != nil {
			t.Fatal(err)
		}
		editBadger(t, data, "action.succeeded", edit.new, edit.old, false)
	}
	wantCode(t, inproc(t, "audit", "--data", data, "--verify", "shaped"), 0)
}

// checkAuditLines: JSON Lines of the run "shaped", one event per line, the
// output whole.
func checkAuditLines(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var seen bool
	for i, l := range lines {
		var ev ledger.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Seq != uint64(i)+1 {
			t.Fatalf("line %d is not event %d: %v\n%s", i+1, i+1, err, out)
		}
		if ev.Type == ledger.EventActionSucceeded {
			var got, want any
			if err := json.Unmarshal(ev.Data, &got); err != nil {
				t.Fatal(err)
			}
			json.Unmarshal([]byte(`{"output":`+shapedBody+`}`), &want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("the output on the line is %v, want %v", got, want)
			}
			seen = true
		}
	}
	if !seen {
		t.Fatalf("no action.succeeded line:\n%s", out)
	}
}

// getRaw GETs path from the service and returns the answer's body.
func (s *served) getRaw(t *testing.T, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, b)
	}
	return string(b)
}

// streamRunRaw dials a run's WebSocket from its first event and sends each
// frame as it came (the channel closes when the socket ends).
func streamRunRaw(t *testing.T, base, token, runID string) <-chan string {
	t.Helper()
	u := "ws" + strings.TrimPrefix(base, "http") + "/v1/runs/" + runID + "/ws?after=0"
	c, resp, err := websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", u, err, resp)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan string, 256)
	go func() {
		defer close(ch)
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			ch <- string(b)
		}
	}()
	return ch
}
