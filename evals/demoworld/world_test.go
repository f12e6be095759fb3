package demoworld

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func do(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, url, b, err)
	}
	m, _ := v.(map[string]any)
	if arr, ok := v.([]any); ok {
		m = map[string]any{"items": arr}
	}
	return resp.StatusCode, m
}

func TestWorldCountsEffectsPerLogicalRequest(t *testing.T) {
	t.Parallel()
	w := Start()
	defer w.Close()

	inv := `{"customer":"c_1","amount":1200,"currency":"EUR","reference":"r1"}`
	code, first := do(t, "POST", w.Payments.URL+"/invoices", "k1", inv)
	if code != 201 {
		t.Fatalf("first invoice: status %d", code)
	}
	code, again := do(t, "POST", w.Payments.URL+"/invoices", "k1", inv)
	if code != 200 || again["id"] != first["id"] {
		t.Fatalf("same key: status %d, %v, want 200 and %v", code, again["id"], first["id"])
	}
	if code, _ := do(t, "POST", w.Payments.URL+"/invoices", "k1", `{"customer":"c_1","amount":5,"currency":"EUR","reference":"r1"}`); code != 422 {
		t.Fatalf("key reused with another body: status %d, want 422", code)
	}
	if code, _ := do(t, "POST", w.Payments.URL+"/invoices", "", inv); code != 400 {
		t.Fatalf("no key: status %d, want 400", code)
	}
	// A second key for the same reference is a second effect: the counter must see it.
	do(t, "POST", w.Payments.URL+"/invoices", "k2", inv)
	if n := w.Effect("payments/r1"); n != 2 {
		t.Fatalf("payments/r1 = %d, want 2", n)
	}

	_, c := do(t, "POST", w.CRM.URL+"/contacts", "", `{"company":"ACME","email":"a@x","external_ref":"dk1_a"}`)
	if c["id"] != "c_1" {
		t.Fatalf("contact id %v", c["id"])
	}
	_, found := do(t, "GET", w.CRM.URL+"/contacts?external_ref=dk1_a", "", "")
	if items := found["items"].([]any); len(items) != 1 {
		t.Fatalf("lookup by key found %d, want 1", len(items))
	}
	_, none := do(t, "GET", w.CRM.URL+"/contacts?external_ref=dk1_b", "", "")
	if items := none["items"].([]any); len(items) != 0 {
		t.Fatalf("lookup of another key found %d, want 0", len(items))
	}

	for range 3 {
		do(t, "PUT", w.Settings.URL+"/accounts/c_1/settings", "", `{"plan":"pro"}`)
	}
	do(t, "PUT", w.Settings.URL+"/accounts/c_1/settings", "", `{"plan":"starter"}`)
	if n := w.Effect("settings/c_1"); n != 2 {
		t.Fatalf("settings changes = %d, want 2 (one per distinct state)", n)
	}
	if n := w.Requests("settings"); n != 4 {
		t.Fatalf("settings requests = %d, want 4", n)
	}

	do(t, "POST", w.Email.URL+"/send", "", `{"to":"a@x","template":"welcome"}`)
	do(t, "POST", w.Email.URL+"/send", "", `{"to":"a@x","template":"welcome"}`)
	if n := w.Effect("email/a@x/welcome"); n != 2 {
		t.Fatalf("emails = %d, want 2", n)
	}
	_, price := do(t, "GET", w.Catalogue.URL+"/plans/pro", "", "")
	if price["amount"] != float64(1200) {
		t.Fatalf("price %v", price)
	}
}

func TestToolsFileAndPlanAreJSON(t *testing.T) {
	t.Parallel()
	w := Start()
	defer w.Close()
	var f struct {
		Version int `json:"version"`
		Tools   []struct {
			Name   string `json:"name"`
			Effect string `json:"effect"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(w.ToolsFile(ToolsOptions{}), &f); err != nil {
		t.Fatal(err)
	}
	if f.Version != 1 || len(f.Tools) != 5 {
		t.Fatalf("tools file: version %d, %d tools", f.Version, len(f.Tools))
	}
	var p struct {
		Actions []json.RawMessage `json:"actions"`
	}
	if err := json.Unmarshal(OnboardingPlan(), &p); err != nil || len(p.Actions) != 5 {
		t.Fatalf("plan: %v, %d actions", err, len(p.Actions))
	}
}
