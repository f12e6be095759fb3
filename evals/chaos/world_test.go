package chaos

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// setup starts a world without faults (unless cfg says otherwise) as an
// httptest server.
func setup(t *testing.T, cfg WorldConfig) (*World, *httptest.Server) {
	t.Helper()
	if cfg.Faults == (Faults{}) {
		cfg.Faults = Faults{None: true}
	}
	cfg.AnswerDelayMax = time.Millisecond
	w := NewWorld(cfg)
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	return w, srv
}

type answer struct {
	code int
	body string
	hdr  http.Header
}

func do(t *testing.T, method, url, body string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}
}

func TestPaymentsKeys(t *testing.T) {
	t.Parallel()
	w, srv := setup(t, WorldConfig{})
	url := srv.URL + "/ns/payments/charges"
	body := `{"customer": "ct_1", "amount": 100, "currency": "EUR", "reference": "r1"}`
	k := map[string]string{"Idempotency-Key": "k1"}

	first := do(t, "POST", url, body, k)
	if first.code != http.StatusCreated {
		t.Fatalf("first charge: %d %s", first.code, first.body)
	}
	again := do(t, "POST", url, body, k)
	if again.code != first.code || again.body != first.body || again.hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same key again: %d %s %v, want the stored answer", again.code, again.body, again.hdr)
	}
	if a := do(t, "POST", url, `{"customer": "ct_1", "amount": 101, "currency": "EUR", "reference": "r1"}`, k); a.code != http.StatusUnprocessableEntity {
		t.Fatalf("key reused with another body: %d, want 422", a.code)
	}
	if a := do(t, "POST", url, body, map[string]string{"Idempotency-Key": "k2"}); a.code != http.StatusCreated {
		t.Fatalf("another key: %d", a.code)
	}
	if a := do(t, "POST", url, body, nil); a.code != http.StatusCreated {
		t.Fatalf("no key: %d", a.code)
	}
	if a := do(t, "POST", url, `{"customer": "ct_1", "amount": 9500, "currency": "EUR", "reference": "r2"}`, k); a.code != http.StatusPaymentRequired {
		t.Fatalf("declined amount: %d, want 402", a.code)
	}
	s := w.Snapshot("ns")
	if len(s.Charges) != 3 {
		t.Fatalf("charges %+v, want 3 (one per key, one without)", s.Charges)
	}
	st := s.Requests["payments/r1"]
	if st.Received != 5 || st.Replayed != 1 || st.Committed != 3 {
		t.Fatalf("payments/r1 requests %+v", st)
	}
}

// TestLateCommitAndInFlightKey: a late request commits after the timeout even
// though its caller gave up, and meanwhile the same key answers 409; the
// audit's quiet wait sees the late commit.
func TestLateCommitAndInFlightKey(t *testing.T) {
	t.Parallel()
	// The late commit lands after Timeout: 3s leaves the second request
	// (sent right after the first gave up at 50ms) time to meet the key in
	// flight on a loaded machine (200ms did not, once).
	w, srv := setup(t, WorldConfig{Timeout: 3 * time.Second, LateMax: time.Millisecond, Faults: Faults{Late: 1}})
	url := srv.URL + "/ns/payments/charges"
	body := `{"customer": "ct_1", "amount": 100, "currency": "EUR", "reference": "r1"}`
	client := &http.Client{Timeout: 50 * time.Millisecond}
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", "k1")
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the late request answered in time: %s", resp.Status)
	}
	if n := len(w.Snapshot("ns").Charges); n != 0 {
		t.Fatalf("%d charges before the late commit", n)
	}
	if a := do(t, "POST", url, body, map[string]string{"Idempotency-Key": "k1"}); a.code != http.StatusConflict {
		t.Fatalf("same key while in flight: %d %s, want 409", a.code, a.body)
	}
	a := do(t, "GET", srv.URL+"/ns/_audit?quiet=10s", "", nil)
	var audit Audit
	if err := json.Unmarshal([]byte(a.body), &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Charges) != 1 || audit.Processing != 0 || audit.Requests["payments/r1"].Late != 1 {
		t.Fatalf("after the quiet wait: %+v", audit)
	}
}

// TestLeadsLag: a lead is found by its note only after its lag; a contact at
// once; an empty note finds nothing.
func TestLeadsLag(t *testing.T) {
	t.Parallel()
	w, srv := setup(t, WorldConfig{LagMax: time.Hour})
	if a := do(t, "POST", srv.URL+"/ns/leads/leads", `{"name": "L", "email": "l@x", "note": "k1"}`, nil); a.code != http.StatusCreated {
		t.Fatalf("create lead: %d %s", a.code, a.body)
	}
	if a := do(t, "POST", srv.URL+"/ns/crm/contacts", `{"name": "C", "email": "c@x", "note": "k2"}`, nil); a.code != http.StatusCreated {
		t.Fatalf("create contact: %d %s", a.code, a.body)
	}
	if a := do(t, "POST", srv.URL+"/ns/crm/contacts", `{"name": "D", "email": "d@x"}`, nil); a.code != http.StatusCreated {
		t.Fatalf("create contact without note: %d %s", a.code, a.body)
	}
	// A lag up to an hour, drawn from the seed: almost surely not yet visible.
	s := w.Snapshot("ns")
	lagged := time.Now().Before(w.tenants["ns"].leads[0].visibleAt)
	lead := do(t, "GET", srv.URL+"/ns/leads/leads?note=k1", "", nil)
	if lagged && lead.body != "[]" {
		t.Fatalf("a lagging lead was found at once: %s", lead.body)
	}
	if c := do(t, "GET", srv.URL+"/ns/crm/contacts?note=k2", "", nil); !strings.Contains(c.body, `"k2"`) {
		t.Fatalf("contact not found by note: %s", c.body)
	}
	if c := do(t, "GET", srv.URL+"/ns/crm/contacts?note=", "", nil); c.body != "[]" {
		t.Fatalf("an empty note found %s", c.body)
	}
	if len(s.Leads) != 1 || len(s.Contacts) != 2 {
		t.Fatalf("audit shows %d leads and %d contacts, want 1 and 2 (searches lag, the audit does not)", len(s.Leads), len(s.Contacts))
	}
	if got := w.Snapshot("ns"); got.Lookups != 3 || got.LookupHits != 1+btoi(!lagged) {
		t.Fatalf("lookups %d hits %d", got.Lookups, got.LookupHits)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestSettingsAndEmail(t *testing.T) {
	t.Parallel()
	w, srv := setup(t, WorldConfig{})
	for i, body := range []string{`{"plan": "pro"}`, `{"plan": "pro"}`, `{"plan": "team"}`} {
		if a := do(t, "PUT", srv.URL+"/ns/settings/accounts/ct_1", body, nil); a.code != http.StatusOK {
			t.Fatalf("put %d: %d %s", i, a.code, a.body)
		}
	}
	for range 2 {
		if a := do(t, "POST", srv.URL+"/ns/email/messages", `{"to": "a@x", "template": "welcome"}`, nil); a.code != http.StatusOK {
			t.Fatalf("send: %d %s", a.code, a.body)
		}
	}
	s := w.Snapshot("ns")
	if st := s.Settings["ct_1"]; st.Writes != 3 || st.Changes != 2 || string(st.Value) != `{"plan":"team"}` {
		t.Fatalf("settings %+v", st)
	}
	if len(s.Emails) != 2 || s.Requests["email/a@x|welcome"].Committed != 2 {
		t.Fatalf("emails %+v", s.Emails)
	}
	do(t, "DELETE", srv.URL+"/ns/_audit", "", nil)
	if s := w.Snapshot("ns"); len(s.Emails) != 0 {
		t.Fatalf("the namespace survived its deletion")
	}
}

// TestFaults: every fault kind behaves as documented, and fates are a
// function of the seed.
func TestFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		faults  Faults
		code    int  // 0: no answer (dropped)
		commits bool // the effect exists afterwards
	}{
		{"throttle", Faults{Throttle: 1}, http.StatusTooManyRequests, false},
		{"fail", Faults{Fail: 1}, http.StatusInternalServerError, false},
		{"commit then 500", Faults{CommitThen500: 1}, http.StatusInternalServerError, true},
		{"commit then drop", Faults{CommitDrop: 1}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, srv := setup(t, WorldConfig{Faults: c.faults})
			resp, err := http.Post(srv.URL+"/ns/email/messages", "application/json", bytes.NewBufferString(`{"to": "a@x", "template": "t"}`))
			code := 0
			if err == nil {
				code = resp.StatusCode
				if code == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "1" {
					t.Errorf("429 without Retry-After: 1")
				}
				resp.Body.Close()
			}
			if code != c.code {
				t.Fatalf("answer %d (err %v), want %d", code, err, c.code)
			}
			if got := len(w.Snapshot("ns").Emails) == 1; got != c.commits {
				t.Fatalf("committed %v, want %v", got, c.commits)
			}
		})
	}
	a, b := NewWorld(WorldConfig{Seed: 7}), NewWorld(WorldConfig{Seed: 7})
	c := NewWorld(WorldConfig{Seed: 8})
	same, differ := true, false
	for n := 1; n <= 200; n++ {
		fa, fb, fc := a.fateOf("ns", "email/x", n, true), b.fateOf("ns", "email/x", n, true), c.fateOf("ns", "email/x", n, true)
		same = same && fa == fb
		differ = differ || fa != fc
	}
	if !same || !differ {
		t.Fatalf("fates: same seed same=%v, other seed differs=%v", same, differ)
	}
}

// The audit's log (asked with ?log=1) holds every write request that reached
// a service, with its time and its body, throttled ones included; reads are
// not in it, and the plain audit leaves it out.
func TestWorldLog(t *testing.T) {
	t.Parallel()
	_, srv := setup(t, WorldConfig{})
	before := time.Now().UTC()
	do(t, "GET", srv.URL+"/ns/catalogue/items/pro", "", nil)
	do(t, "POST", srv.URL+"/ns/payments/charges", `{"reference": "r1", "customer": "ct_1", "amount": 100, "currency": "EUR"}`, nil)
	do(t, "PUT", srv.URL+"/ns/settings/accounts/ct_1", `{"plan": "pro"}`, nil)
	var a Audit
	if err := json.Unmarshal([]byte(do(t, "GET", srv.URL+"/ns/_audit?log=1", "", nil).body), &a); err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, body string }{
		{"payments/r1", `{"amount":100,"currency":"EUR","customer":"ct_1","reference":"r1"}`},
		{"settings/ct_1", `{"plan":"pro"}`},
	}
	if len(a.Log) != len(want) {
		t.Fatalf("log %+v, want %d writes", a.Log, len(want))
	}
	for i, w := range want {
		if got := a.Log[i]; got.Name != w.name || string(got.Body) != w.body || got.At.Before(before) || got.At.After(time.Now()) {
			t.Errorf("log[%d] = %s %s at %s, want %s %s", i, got.Name, got.Body, got.At, w.name, w.body)
		}
	}
	if plain := do(t, "GET", srv.URL+"/ns/_audit", "", nil).body; strings.Contains(plain, `"log"`) {
		t.Errorf("the plain audit carries the log: %s", plain)
	}
}
