// Package mcpservetest is an HTTP world for tests of docket as an MCP
// server: a payments API that deduplicates by Idempotency-Key (keyed), a
// settings API with PUT semantics (idempotent), an email sender with neither
// key nor search (at_most_once) and a catalogue (read_only), served by an
// httptest.Server on loopback, counting every request and every effect, and
// the tools file that describes them.
//
// Imports: the standard library only.
package mcpservetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// World is the simulated services. Safe for concurrent use.
type World struct {
	URL string
	srv *httptest.Server

	mu          sync.Mutex
	charges     map[string]json.RawMessage // Idempotency-Key → the charge made
	chargeReqs  int
	emails      map[string]int // "to" → emails sent
	emailReqs   int
	settings    map[string]json.RawMessage
	settingPuts int
	settingReqs int
	hold        chan struct{} // non-nil: charges and emails wait after their effect until it is closed
	arrived     chan string   // told the effect's name when a held request made its effect
	emailFault  string        // "", "drop" (effect, then the connection is cut), "reject" (400, no effect)
}

// Start serves a new world until the test's cleanup closes it.
func Start() *World {
	w := &World{charges: map[string]json.RawMessage{}, emails: map[string]int{}, settings: map[string]json.RawMessage{}, arrived: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", w.charge)
	mux.HandleFunc("POST /emails", w.email)
	mux.HandleFunc("PUT /settings/{name}", w.setting)
	mux.HandleFunc("GET /catalog", func(rw http.ResponseWriter, r *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]any{"items": []string{"welcome-pack", "invoice"}})
	})
	mux.HandleFunc("GET /effects", func(rw http.ResponseWriter, r *http.Request) {
		writeJSON(rw, http.StatusOK, w.Effects())
	})
	w.srv = httptest.NewServer(mux)
	w.URL = w.srv.URL
	return w
}

// Close stops the server.
func (w *World) Close() { w.srv.Close() }

// Hold makes every later charge and email wait, after its effect and before
// its answer, until Release. Arrived reports each held effect.
func (w *World) Hold() {
	w.mu.Lock()
	w.hold = make(chan struct{})
	w.mu.Unlock()
}

// Release lets the held requests answer.
func (w *World) Release() {
	w.mu.Lock()
	if w.hold != nil {
		close(w.hold)
		w.hold = nil
	}
	w.mu.Unlock()
}

// Arrived is told "charge" or "email" when a held request made its effect.
func (w *World) Arrived() <-chan string { return w.arrived }

// EmailFault sets what the email sender does to the next requests: "" (send),
// "drop" (send, then cut the connection without an answer), "reject" (400).
func (w *World) EmailFault(f string) {
	w.mu.Lock()
	w.emailFault = f
	w.mu.Unlock()
}

// Effects is what happened: charges made, emails sent (per recipient),
// setting writes that changed something, and the requests received.
type Effects struct {
	Charges        int            `json:"charges"`
	ChargeRequests int            `json:"charge_requests"`
	Emails         map[string]int `json:"emails"`
	EmailRequests  int            `json:"email_requests"`
	SettingPuts    int            `json:"setting_puts"`
	SettingReqs    int            `json:"setting_requests"`
}

// Effects returns the counters.
func (w *World) Effects() Effects {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := Effects{Charges: len(w.charges), ChargeRequests: w.chargeReqs, Emails: map[string]int{}, EmailRequests: w.emailReqs, SettingPuts: w.settingPuts, SettingReqs: w.settingReqs}
	for k, v := range w.emails {
		e.Emails[k] = v
	}
	return e
}

func (w *World) held(what string) chan struct{} {
	w.mu.Lock()
	h := w.hold
	w.mu.Unlock()
	if h != nil {
		w.arrived <- what
	}
	return h
}

func (w *World) charge(rw http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	if key == "" {
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "Idempotency-Key required"})
		return
	}
	w.mu.Lock()
	w.chargeReqs++
	out, ok := w.charges[key]
	if !ok {
		var in map[string]any
		_ = json.Unmarshal(body, &in)
		out, _ = json.Marshal(map[string]any{"id": fmt.Sprintf("ch_%d", len(w.charges)+1), "customer": in["customer"], "amount": in["amount"]})
		w.charges[key] = out
	}
	w.mu.Unlock()
	if h := w.held("charge"); h != nil {
		select {
		case <-h:
		case <-r.Context().Done():
			return
		}
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Write(out)
}

func (w *World) email(rw http.ResponseWriter, r *http.Request) {
	var in struct {
		To string `json:"to"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &in)
	w.mu.Lock()
	w.emailReqs++
	fault := w.emailFault
	if fault == "reject" || strings.TrimSpace(in.To) == "" {
		w.mu.Unlock()
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "no such mailbox"})
		return
	}
	w.emails[in.To]++
	n := w.emails[in.To]
	w.mu.Unlock()
	if fault == "drop" {
		if hj, ok := rw.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
	}
	if h := w.held("email"); h != nil {
		select {
		case <-h:
		case <-r.Context().Done():
			return
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"sent_to": in.To, "n": n})
}

func (w *World) setting(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	name := r.PathValue("name")
	w.mu.Lock()
	w.settingReqs++
	if string(w.settings[name]) != string(body) {
		w.settingPuts++
		w.settings[name] = body
	}
	w.mu.Unlock()
	writeJSON(rw, http.StatusOK, map[string]any{"name": name, "value": json.RawMessage(body)})
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	json.NewEncoder(rw).Encode(v)
}

// ToolsFile is the tools file of the world at url (HTTP tools only).
func ToolsFile(url string) []byte {
	return []byte(strings.ReplaceAll(toolsFile, "WORLD", url))
}

const toolsFile = `{
  "version": 1,
  "tools": [
    {"name": "charge", "description": "Charge a customer (the provider deduplicates by Idempotency-Key).", "effect": "keyed",
     "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}, "amount": {"type": "integer"}}, "required": ["customer", "amount"], "additionalProperties": false},
     "request": {"method": "POST", "url": "WORLD/charges"}, "key_header": "Idempotency-Key", "timeout": "20s"},
    {"name": "set_setting", "description": "Set a setting (PUT).", "effect": "idempotent",
     "input_schema": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}}, "required": ["name", "value"], "additionalProperties": false},
     "request": {"method": "PUT", "url": "WORLD/settings/{{.name}}", "body": {"value": "{{.value}}"}}},
    {"name": "send_email", "description": "Send an email (no key, no search).", "effect": "at_most_once",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}}, "required": ["to", "subject"], "additionalProperties": false},
     "request": {"method": "POST", "url": "WORLD/emails"}, "timeout": "5s"},
    {"name": "catalog", "description": "List the catalogue.", "effect": "read_only",
     "input_schema": {"type": "object", "properties": {}},
     "request": {"method": "GET", "url": "WORLD/catalog"}}
  ]
}`
