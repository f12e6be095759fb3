// Package demoworld is a small simulated set of external systems for the
// demo and the crash tests: real HTTP servers (httptest) on loopback that
// behave like the services an agent touches, and count every effect per
// logical request so that a caller can check "this happened exactly once".
//
// The systems, one per effect class:
//
//   - catalogue (read_only): GET /plans/{plan} answers the plan's price.
//   - CRM (lookup): POST /contacts creates a contact carrying an external_ref
//     (docket's key); GET /contacts?external_ref=K finds it again.
//   - payments (keyed): POST /invoices honours the Idempotency-Key header like
//     a card processor: the same key answers the stored invoice, no new charge.
//   - settings (idempotent): PUT /accounts/{id}/settings sets an account's
//     settings; repeating it changes nothing more.
//   - email (at_most_once): POST /send sends a message; it takes no key and
//     cannot be searched, so a repeat is a second email.
//
// A logical request is named by business data in the request, never by
// docket's key, so a retry under a different key would show up as a second
// effect: contacts by email, invoices by reference, settings by account,
// emails by recipient and template.
//
// Imports: the standard library only.
package demoworld

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
)

// World is the running set of simulated systems. Safe for concurrent use.
type World struct {
	Catalogue *httptest.Server
	CRM       *httptest.Server
	Payments  *httptest.Server
	Settings  *httptest.Server
	Email     *httptest.Server

	mu       sync.Mutex
	requests map[string]int // system → requests served
	effects  map[string]int // "system/logical request" → effects

	contacts []contact
	invoices map[string]invoice // by idempotency key
	settings map[string][]byte  // account → canonical settings JSON
	emails   int
}

type contact struct {
	ID          string `json:"id"`
	Company     string `json:"company"`
	Email       string `json:"email"`
	ExternalRef string `json:"external_ref"`
}

type invoice struct {
	body []byte // the request body the key was first used with
	resp []byte
}

// Start starts every system. Close stops them.
func Start() *World {
	w := &World{
		requests: map[string]int{},
		effects:  map[string]int{},
		invoices: map[string]invoice{},
		settings: map[string][]byte{},
	}
	w.Catalogue = httptest.NewServer(w.catalogue())
	w.CRM = httptest.NewServer(w.crm())
	w.Payments = httptest.NewServer(w.payments())
	w.Settings = httptest.NewServer(w.settingsAPI())
	w.Email = httptest.NewServer(w.email())
	return w
}

// Close stops every system.
func (w *World) Close() {
	for _, s := range []*httptest.Server{w.Catalogue, w.CRM, w.Payments, w.Settings, w.Email} {
		s.Close()
	}
}

// Effects returns a copy of the effect counters: "system/logical request" →
// number of times it took effect. Systems: "crm", "payments", "settings",
// "email". Settings count changes of state, not writes.
func (w *World) Effects() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.effects))
	for k, v := range w.effects {
		out[k] = v
	}
	return out
}

// Effect returns one effect counter (0 when it never happened).
func (w *World) Effect(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.effects[name]
}

// Requests returns how many requests a system ("catalogue", "crm",
// "payments", "settings", "email") has served, effects or not.
func (w *World) Requests(system string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests[system]
}

func (w *World) count(system string) {
	w.mu.Lock()
	w.requests[system]++
	w.mu.Unlock()
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	writeRaw(rw, code, b)
}

func writeRaw(rw http.ResponseWriter, code int, b []byte) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	rw.Write(b)
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	return dec.Decode(v)
}

func (w *World) catalogue() http.Handler {
	prices := map[string]map[string]any{
		"starter": {"plan": "starter", "amount": 300, "currency": "EUR"},
		"pro":     {"plan": "pro", "amount": 1200, "currency": "EUR"},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /plans/{plan}", func(rw http.ResponseWriter, r *http.Request) {
		w.count("catalogue")
		p, ok := prices[r.PathValue("plan")]
		if !ok {
			writeJSON(rw, http.StatusNotFound, map[string]string{"error": "no such plan"})
			return
		}
		writeJSON(rw, http.StatusOK, p)
	})
	return mux
}

func (w *World) crm() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /contacts", func(rw http.ResponseWriter, r *http.Request) {
		w.count("crm")
		var c contact
		if err := decodeBody(r, &c); err != nil || c.Email == "" {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "company and email are required"})
			return
		}
		w.mu.Lock()
		c.ID = fmt.Sprintf("c_%d", len(w.contacts)+1)
		w.contacts = append(w.contacts, c)
		w.effects["crm/"+c.Email]++
		w.mu.Unlock()
		writeJSON(rw, http.StatusCreated, c)
	})
	mux.HandleFunc("GET /contacts", func(rw http.ResponseWriter, r *http.Request) {
		w.count("crm")
		ref := r.URL.Query().Get("external_ref")
		found := []contact{}
		w.mu.Lock()
		for _, c := range w.contacts {
			if ref != "" && c.ExternalRef == ref {
				found = append(found, c)
			}
		}
		w.mu.Unlock()
		writeJSON(rw, http.StatusOK, found)
	})
	return mux
}

func (w *World) payments() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invoices", func(rw http.ResponseWriter, r *http.Request) {
		w.count("payments")
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "Idempotency-Key header is required"})
			return
		}
		var body bytes.Buffer
		if _, err := body.ReadFrom(r.Body); err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "unreadable body"})
			return
		}
		var in struct {
			Customer  string      `json:"customer"`
			Amount    json.Number `json:"amount"`
			Currency  string      `json:"currency"`
			Reference string      `json:"reference"`
		}
		dec := json.NewDecoder(bytes.NewReader(body.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&in); err != nil || in.Reference == "" || in.Amount == "" {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "customer, amount, currency and reference are required"})
			return
		}
		canon, err := canonical(body.Bytes())
		if err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if prev, ok := w.invoices[key]; ok {
			if !bytes.Equal(prev.body, canon) {
				writeJSON(rw, http.StatusUnprocessableEntity, map[string]string{"error": "Idempotency-Key reused with a different request"})
				return
			}
			rw.Header().Set("Idempotent-Replayed", "true")
			writeRaw(rw, http.StatusOK, prev.resp)
			return
		}
		resp, err := json.Marshal(map[string]any{
			"id":        fmt.Sprintf("inv_%d", len(w.invoices)+1),
			"customer":  in.Customer,
			"amount":    in.Amount,
			"currency":  in.Currency,
			"reference": in.Reference,
			"status":    "open",
		})
		if err != nil {
			writeJSON(rw, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		w.invoices[key] = invoice{body: canon, resp: resp}
		w.effects["payments/"+in.Reference]++
		writeRaw(rw, http.StatusCreated, resp)
	})
	return mux
}

func (w *World) settingsAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /accounts/{account}/settings", func(rw http.ResponseWriter, r *http.Request) {
		w.count("settings")
		var v map[string]any
		if err := decodeBody(r, &v); err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "settings must be a JSON object"})
			return
		}
		canon, err := json.Marshal(v) // maps marshal with sorted keys
		if err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		account := r.PathValue("account")
		w.mu.Lock()
		if !bytes.Equal(w.settings[account], canon) {
			w.settings[account] = canon
			w.effects["settings/"+account]++
		}
		w.mu.Unlock()
		writeJSON(rw, http.StatusOK, map[string]any{"account": account, "settings": json.RawMessage(canon)})
	})
	return mux
}

func (w *World) email() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /send", func(rw http.ResponseWriter, r *http.Request) {
		w.count("email")
		var in struct {
			To       string `json:"to"`
			Template string `json:"template"`
		}
		if err := decodeBody(r, &in); err != nil || in.To == "" || in.Template == "" {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "to and template are required"})
			return
		}
		w.mu.Lock()
		w.emails++
		id := fmt.Sprintf("msg_%d", w.emails)
		w.effects["email/"+in.To+"/"+in.Template]++
		w.mu.Unlock()
		writeJSON(rw, http.StatusOK, map[string]string{"message_id": id, "to": in.To})
	})
	return mux
}

// canonical re-encodes a JSON object with sorted keys and numbers kept as written.
func canonical(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	return json.Marshal(v)
}

// ToolsOptions tune the tools file.
type ToolsOptions struct {
	// Timeout is every tool's call timeout (a Go duration string); "" = "2s".
	// It bounds how long the executor waits before it trusts the CRM lookup's
	// "not found" after a crash.
	Timeout string
}

// ToolsFile returns a tools file (tools/README.md, "The tools file", version 1) that
// describes every system of w, one tool per system:
// catalogue_price (read_only), crm_create_contact (lookup),
// payments_create_invoice (keyed), settings_put (idempotent),
// email_send (at_most_once).
func (w *World) ToolsFile(o ToolsOptions) []byte {
	timeout := o.Timeout
	if timeout == "" {
		timeout = "2s"
	}
	obj := func(props map[string]any, required ...string) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	str := map[string]any{"type": "string"}
	file := map[string]any{
		"version": 1,
		"tools": []any{
			map[string]any{
				"name":         "catalogue_price",
				"description":  "Look up the price of a subscription plan.",
				"effect":       "read_only",
				"input_schema": obj(map[string]any{"plan": str}, "plan"),
				"request":      map[string]any{"method": "GET", "url": w.Catalogue.URL + "/plans/{{.plan}}"},
				"timeout":      timeout,
			},
			map[string]any{
				"name":         "crm_create_contact",
				"description":  "Create a customer contact in the CRM.",
				"effect":       "lookup",
				"input_schema": obj(map[string]any{"company": str, "email": str}, "company", "email"),
				"request": map[string]any{
					"method": "POST",
					"url":    w.CRM.URL + "/contacts",
					"body":   map[string]any{"company": "{{.company}}", "email": "{{.email}}", "external_ref": "{{key}}"},
				},
				"lookup": map[string]any{
					"method": "GET",
					"url":    w.CRM.URL + "/contacts?external_ref={{key}}",
					"found":  "nonempty",
				},
				"visibility_lag": "0s",
				"timeout":        timeout,
			},
			map[string]any{
				"name":        "payments_create_invoice",
				"description": "Invoice a customer. The payments API deduplicates by Idempotency-Key.",
				"effect":      "keyed",
				"input_schema": obj(map[string]any{
					"customer":  str,
					"amount":    map[string]any{"type": "integer", "minimum": 1},
					"currency":  str,
					"reference": str,
				}, "customer", "amount", "currency", "reference"),
				"request":    map[string]any{"method": "POST", "url": w.Payments.URL + "/invoices"},
				"key_header": "Idempotency-Key",
				"key_ttl":    "24h",
				"timeout":    timeout,
			},
			map[string]any{
				"name":        "settings_put",
				"description": "Set an account's settings (replaces them).",
				"effect":      "idempotent",
				"input_schema": obj(map[string]any{
					"account":  str,
					"settings": map[string]any{"type": "object"},
				}, "account", "settings"),
				"request": map[string]any{
					"method": "PUT",
					"url":    w.Settings.URL + "/accounts/{{.account}}/settings",
					"body":   "{{.settings}}",
				},
				"timeout": timeout,
			},
			map[string]any{
				"name":        "email_send",
				"description": "Send an email from a template. Cannot be deduplicated or searched.",
				"effect":      "at_most_once",
				"input_schema": obj(map[string]any{
					"to":         str,
					"template":   str,
					"contact_id": str,
				}, "to", "template"),
				"request": map[string]any{"method": "POST", "url": w.Email.URL + "/send"},
				"timeout": timeout,
			},
		},
	}
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		panic(err) // only maps of strings and numbers: cannot fail
	}
	return append(b, '\n')
}

// OnboardingGoal is the goal of the built-in plan.
const OnboardingGoal = "Onboard ACME: look up the plan price, create the CRM contact, invoice 1200 EUR, set the account settings, email the welcome pack"

// OnboardingPlan is the demo's plan: five actions, one per effect class, with
// references from later actions to earlier outputs.
func OnboardingPlan() []byte {
	return []byte(`{
  "goal": "` + OnboardingGoal + `",
  "actions": [
    {"id": "price", "tool": "catalogue_price", "args": {"plan": "pro"},
     "why": "the invoice amount comes from the catalogue"},
    {"id": "contact", "tool": "crm_create_contact",
     "args": {"company": "ACME", "email": "billing@acme.example"}, "depends_on": ["price"]},
    {"id": "invoice", "tool": "payments_create_invoice",
     "args": {"customer": "${contact.output.id}", "amount": "${price.output.amount}",
              "currency": "${price.output.currency}", "reference": "onboarding-acme"},
     "depends_on": ["price", "contact"]},
    {"id": "settings", "tool": "settings_put",
     "args": {"account": "${contact.output.id}", "settings": {"plan": "pro", "invoice": "${invoice.output.id}"}},
     "depends_on": ["contact", "invoice"]},
    {"id": "welcome", "tool": "email_send",
     "args": {"to": "billing@acme.example", "template": "welcome-pack", "contact_id": "${contact.output.id}"},
     "depends_on": ["contact", "settings"]}
  ]
}
`)
}

// OnboardingEffects are the effects the onboarding plan must leave, each
// exactly once.
var OnboardingEffects = []string{
	"crm/billing@acme.example",
	"payments/onboarding-acme",
	"settings/c_1",
	"email/billing@acme.example/welcome-pack",
}

// Describe returns a one-line summary of the effect counters, for people.
func (w *World) Describe() string {
	eff := w.Effects()
	names := make([]string, 0, len(eff))
	for k := range eff {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", k, eff[k]))
	}
	return strings.Join(parts, " ")
}
