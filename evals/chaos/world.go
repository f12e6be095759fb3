package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// WorldConfig sets how the simulated world behaves. Zero fields take the
// defaults documented on them (WithDefaults).
type WorldConfig struct {
	// Seed decides every request's fate (with the request's namespace,
	// service, logical effect and its place among that effect's requests).
	Seed uint64 `json:"seed"`
	// Timeout is the call timeout the tools file gives the world's tools: a
	// late commit lands this long plus up to LateMax after the request
	// arrived. Default 1s.
	Timeout time.Duration `json:"timeout"`
	// LateMax bounds how far past Timeout a late commit lands. Default 300ms
	// (below the executor's default clock-skew margin of 2s, so a lookup that
	// waits as executor/README.md, Decisions, says sees it).
	LateMax time.Duration `json:"late_max"`
	// AnswerDelayMax bounds the random delay between committing and
	// answering. Default 120ms.
	AnswerDelayMax time.Duration `json:"answer_delay_max"`
	// LagMax bounds the eventually consistent leads service's lag between
	// creating a lead and showing it to searches. Default 1s.
	LagMax time.Duration `json:"lag_max"`
	// RetryAfter is the Retry-After a 429 answer carries, in whole seconds.
	// Default 1.
	RetryAfter int `json:"retry_after"`
	// Faults are the probabilities of each fault for writes; reads (the
	// catalogue and searches) see throttling and 500s at half these rates.
	// The zero value means DefaultFaults; set Faults.None for a world
	// without faults.
	Faults Faults `json:"faults"`
}

// Faults are per-request probabilities. A request meets at most one fault.
type Faults struct {
	Throttle      float64 `json:"throttle"`        // 429 with Retry-After, nothing done
	Fail          float64 `json:"fail"`            // 500 before anything is committed
	CommitThen500 float64 `json:"commit_then_500"` // commit, then answer 500
	CommitDrop    float64 `json:"commit_drop"`     // commit, then drop the connection without an answer
	Late          float64 `json:"late"`            // commit only after the caller's timeout, then answer
	None          bool    `json:"none"`            // no faults at all (the rates above are ignored)
}

// DefaultFaults are the fault rates of a world whose config leaves them zero.
var DefaultFaults = Faults{Throttle: 0.03, Fail: 0.03, CommitThen500: 0.03, CommitDrop: 0.03, Late: 0.03}

// WithDefaults returns c with every zero field set to its default.
func (c WorldConfig) WithDefaults() WorldConfig {
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.LateMax <= 0 {
		c.LateMax = 300 * time.Millisecond
	}
	if c.AnswerDelayMax <= 0 {
		c.AnswerDelayMax = 120 * time.Millisecond
	}
	if c.LagMax <= 0 {
		c.LagMax = time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 1
	}
	if c.Faults == (Faults{}) {
		c.Faults = DefaultFaults
	}
	return c
}

// Charge is a payment the payments service made.
type Charge struct {
	ID        string      `json:"id"`
	Key       string      `json:"key,omitempty"` // the Idempotency-Key it was made with
	Customer  string      `json:"customer"`
	Amount    json.Number `json:"amount"`
	Currency  string      `json:"currency"`
	Reference string      `json:"reference"`
	Status    string      `json:"status"`
}

// Contact is a CRM contact or a lead.
type Contact struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
	Note  string `json:"note"`
	// visibleAt is when a lead becomes visible to searches.
	visibleAt time.Time
}

// Email is a message the email service sent.
type Email struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
	Template  string `json:"template"`
}

// Setting is an account's settings.
type Setting struct {
	Value   json.RawMessage `json:"value"`
	Changes int             `json:"changes"` // writes that changed the value
	Writes  int             `json:"writes"`
}

// Requests counts what one logical effect's requests met. Its key in
// Audit.Requests is "service/identity" (payments/REFERENCE, crm/EMAIL,
// leads/EMAIL, settings/ACCOUNT, email/TO|TEMPLATE, catalogue/SKU,
// search/NOTE).
type Requests struct {
	Received  int `json:"received"`  // requests that reached the service
	Throttled int `json:"throttled"` // answered 429 before doing anything
	Conflicts int `json:"conflicts"` // answered 409: a request with the same key was still in progress
	Replayed  int `json:"replayed"`  // answered from the key store, nothing done
	Processed int `json:"processed"` // requests the service acted on
	Failed    int `json:"failed"`    // 500 before committing
	Committed int `json:"committed"` // effects
	Late      int `json:"late"`      // committed after the caller's timeout
	Dropped   int `json:"dropped"`   // committed, then the connection was dropped
	Answered5 int `json:"after_commit_500"`
}

// Audit is everything a namespace of the world holds: GET /{ns}/_audit.
// This is what the simulated person reads to decide whether an action whose
// outcome is unknown happened, and what the harness compares with the ledger.
type Audit struct {
	Charges    []Charge            `json:"charges"`
	Contacts   []Contact           `json:"contacts"`
	Leads      []Contact           `json:"leads"`
	Settings   map[string]Setting  `json:"settings"`
	Emails     []Email             `json:"emails"`
	Requests   map[string]Requests `json:"requests"`
	Lookups    int                 `json:"lookups"`     // searches served
	LookupHits int                 `json:"lookup_hits"` // searches that found something
	Processing int                 `json:"processing"`  // requests still being processed (a late commit pending)
	// Log is every write request that reached a service, in order of
	// arrival (GET /{ns}/_audit?log=1 only).
	Log []Received `json:"log,omitempty"`
}

// Received is one write request as it reached its service: when, for which
// logical effect (as in Audit.Requests) and with which body (its JSON, keys
// sorted; for settings the new value).
type Received struct {
	At   time.Time       `json:"at"`
	Name string          `json:"name"`
	Body json.RawMessage `json:"body"`
}

// World is the simulated external world: an http.Handler whose first path
// segment is a namespace (one per run). Safe for concurrent use.
type World struct {
	cfg WorldConfig
	mux *http.ServeMux

	mu      sync.Mutex
	tenants map[string]*tenant
}

type tenant struct {
	charges    []Charge
	keys       map[string]*keyEntry
	contacts   []Contact
	leads      []Contact
	settings   map[string]*Setting
	emails     []Email
	requests   map[string]*Requests
	lookups    int
	lookupHits int
	processing int
	idle       chan struct{} // closed when processing drops to 0
	seq        int
	log        []Received
}

type keyEntry struct {
	body     []byte // canonical body the key was first used with
	resp     []byte // stored answer; nil while in progress
	code     int
	inFlight bool
}

// NewWorld returns a world with cfg (defaults filled in).
func NewWorld(cfg WorldConfig) *World {
	w := &World{cfg: cfg.WithDefaults(), tenants: map[string]*tenant{}}
	m := http.NewServeMux()
	m.HandleFunc("GET /{ns}/catalogue/items/{sku}", w.catalogue)
	m.HandleFunc("POST /{ns}/payments/charges", w.charge)
	m.HandleFunc("POST /{ns}/crm/contacts", func(rw http.ResponseWriter, r *http.Request) { w.createContact(rw, r, "crm") })
	m.HandleFunc("GET /{ns}/crm/contacts", func(rw http.ResponseWriter, r *http.Request) { w.search(rw, r, "crm") })
	m.HandleFunc("POST /{ns}/leads/leads", func(rw http.ResponseWriter, r *http.Request) { w.createContact(rw, r, "leads") })
	m.HandleFunc("GET /{ns}/leads/leads", func(rw http.ResponseWriter, r *http.Request) { w.search(rw, r, "leads") })
	m.HandleFunc("PUT /{ns}/settings/accounts/{account}", w.putSettings)
	m.HandleFunc("POST /{ns}/email/messages", w.sendEmail)
	m.HandleFunc("GET /{ns}/_audit", w.audit)
	m.HandleFunc("DELETE /{ns}/_audit", w.drop)
	w.mux = m
	return w
}

func (w *World) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.mux.ServeHTTP(rw, r) }

// tenantLocked returns the namespace's state, creating it. w.mu must be held.
func (w *World) tenantLocked(ns string) *tenant {
	t := w.tenants[ns]
	if t == nil {
		t = &tenant{keys: map[string]*keyEntry{}, settings: map[string]*Setting{}, requests: map[string]*Requests{}}
		w.tenants[ns] = t
	}
	return t
}

func (t *tenant) req(name string) *Requests {
	r := t.requests[name]
	if r == nil {
		r = &Requests{}
		t.requests[name] = r
	}
	return r
}

func (t *tenant) nextID(prefix string) string {
	t.seq++
	return prefix + strconv.Itoa(t.seq)
}

// Fates a request can meet.
type fateKind int

const (
	fateOK fateKind = iota
	fateThrottle
	fateFail
	fateCommit500
	fateDrop
	fateLate
)

type fate struct {
	kind   fateKind
	answer time.Duration // delay between committing and answering
	late   time.Duration // extra delay past the timeout before a late commit
	lag    time.Duration // a lead's visibility lag
}

// fateOf draws the fate of the n-th request (1-based) for a logical effect,
// from the seed alone.
func (w *World) fateOf(ns, name string, n int, write bool) fate {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w.cfg.Seed)
	h.Write(b[:])
	io.WriteString(h, ns)
	h.Write([]byte{0})
	io.WriteString(h, name)
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	s := h.Sum64()
	rng := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	c := w.cfg
	f := fate{
		answer: time.Duration(rng.Int64N(int64(c.AnswerDelayMax) + 1)),
		late:   time.Duration(rng.Int64N(int64(c.LateMax) + 1)),
		lag:    time.Duration(rng.Int64N(int64(c.LagMax) + 1)),
	}
	if c.Faults.None {
		return f
	}
	x := rng.Float64()
	fs := c.Faults
	if !write {
		// Reads: throttling and plain failures only, at half the rates.
		switch {
		case x < fs.Throttle/2:
			f.kind = fateThrottle
		case x < (fs.Throttle+fs.Fail)/2:
			f.kind = fateFail
		}
		return f
	}
	for _, k := range []struct {
		p    float64
		kind fateKind
	}{{fs.Throttle, fateThrottle}, {fs.Fail, fateFail}, {fs.CommitThen500, fateCommit500}, {fs.CommitDrop, fateDrop}, {fs.Late, fateLate}} {
		if x < k.p {
			f.kind = k.kind
			return f
		}
		x -= k.p
	}
	return f
}

// begin counts a request for (service, identity) and draws its fate. A
// write's body (canonical JSON) goes to the namespace's log.
func (w *World) begin(ns, name string, write bool, body []byte) fate {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tenantLocked(ns)
	if write {
		t.log = append(t.log, Received{At: time.Now().UTC(), Name: name, Body: append(json.RawMessage{}, body...)})
	}
	st := t.req(name)
	st.Received++
	f := w.fateOf(ns, name, st.Received, write)
	if f.kind == fateThrottle {
		st.Throttled++
	}
	return f
}

// startProcessing marks a request as acted on; the returned func ends it.
func (w *World) startProcessing(ns, name string) (done func()) {
	w.mu.Lock()
	t := w.tenantLocked(ns)
	t.req(name).Processed++
	if t.processing == 0 {
		t.idle = make(chan struct{})
	}
	t.processing++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			t.processing--
			if t.processing == 0 {
				close(t.idle)
			}
			w.mu.Unlock()
		})
	}
}

// throttle answers 429 with Retry-After.
func (w *World) throttle(rw http.ResponseWriter) {
	rw.Header().Set("Retry-After", strconv.Itoa(w.cfg.RetryAfter))
	writeJSON(rw, http.StatusTooManyRequests, map[string]string{"error": "rate limited"})
}

// perform runs a write after its checks: fail, or (late) commit, then answer
// as the fate says. commit runs under w.mu and returns the answer.
func (w *World) perform(rw http.ResponseWriter, ns, name string, f fate, commit func(t *tenant, st *Requests) (int, []byte), failed func(t *tenant)) {
	done := w.startProcessing(ns, name)
	defer done()
	if f.kind == fateFail {
		w.mu.Lock()
		t := w.tenantLocked(ns)
		t.req(name).Failed++
		if failed != nil {
			failed(t)
		}
		w.mu.Unlock()
		writeJSON(rw, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		return
	}
	if f.kind == fateLate {
		// The caller times out (or dies) while the request is still being
		// processed; it commits anyway.
		time.Sleep(w.cfg.Timeout + f.late)
	}
	w.mu.Lock()
	t := w.tenantLocked(ns)
	st := t.req(name)
	code, body := commit(t, st)
	st.Committed++
	switch f.kind {
	case fateLate:
		st.Late++
	case fateDrop:
		st.Dropped++
	case fateCommit500:
		st.Answered5++
	}
	w.mu.Unlock()
	done()
	switch f.kind {
	case fateCommit500:
		writeJSON(rw, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		return
	case fateDrop:
		dropConn(rw)
		return
	}
	// Committed; the answer comes late, so a kill can land in between.
	time.Sleep(f.answer)
	writeRaw(rw, code, body)
}

// dropConn closes the connection without an answer.
func dropConn(rw http.ResponseWriter) {
	hj, ok := rw.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
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

// readObject reads a JSON object body with numbers kept as written, and
// returns it with its canonical encoding (sorted keys).
func readObject(r *http.Request) (map[string]any, []byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, nil, errors.New("body must be a JSON object")
	}
	canon, err := json.Marshal(m)
	return m, canon, err
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func badRequest(rw http.ResponseWriter, msg string) {
	writeJSON(rw, http.StatusBadRequest, map[string]string{"error": msg})
}

// catalogue prices; an unknown sku is 404.
var prices = map[string]int{"basic": 900, "pro": 2900, "team": 7900}

func (w *World) catalogue(rw http.ResponseWriter, r *http.Request) {
	ns, sku := r.PathValue("ns"), r.PathValue("sku")
	f := w.begin(ns, "catalogue/"+sku, false, nil)
	switch f.kind {
	case fateThrottle:
		w.throttle(rw)
		return
	case fateFail:
		writeJSON(rw, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		return
	}
	time.Sleep(f.answer)
	p, ok := prices[sku]
	if !ok {
		writeJSON(rw, http.StatusNotFound, map[string]string{"error": "no such item"})
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"sku": sku, "price": p, "currency": "EUR"})
}

func (w *World) charge(rw http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	in, canon, err := readObject(r)
	ref := str(in, "reference")
	amount, _ := in["amount"].(json.Number)
	if err != nil || ref == "" || amount == "" || str(in, "customer") == "" {
		badRequest(rw, "customer, amount, currency and reference are required")
		return
	}
	name := "payments/" + ref
	f := w.begin(ns, name, true, canon)
	if f.kind == fateThrottle {
		w.throttle(rw)
		return
	}
	if n, err := amount.Int64(); err == nil && n >= 9000 {
		writeJSON(rw, http.StatusPaymentRequired, map[string]string{"error": "card declined"})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" {
		w.mu.Lock()
		t := w.tenantLocked(ns)
		st := t.req(name)
		if e, ok := t.keys[key]; ok {
			switch {
			case e.inFlight:
				st.Conflicts++
				w.mu.Unlock()
				writeJSON(rw, http.StatusConflict, map[string]string{"error": "a request with this Idempotency-Key is in progress"})
			case !bytes.Equal(e.body, canon):
				w.mu.Unlock()
				writeJSON(rw, http.StatusUnprocessableEntity, map[string]string{"error": "Idempotency-Key reused with a different request"})
			default:
				st.Replayed++
				code, resp := e.code, e.resp
				w.mu.Unlock()
				rw.Header().Set("Idempotent-Replayed", "true")
				writeRaw(rw, code, resp)
			}
			return
		}
		t.keys[key] = &keyEntry{body: canon, inFlight: true}
		w.mu.Unlock()
	}
	w.perform(rw, ns, name, f, func(t *tenant, _ *Requests) (int, []byte) {
		c := Charge{ID: t.nextID("ch_"), Key: key, Customer: str(in, "customer"), Amount: amount,
			Currency: str(in, "currency"), Reference: ref, Status: "succeeded"}
		t.charges = append(t.charges, c)
		c.Key = ""
		resp, _ := json.Marshal(c)
		if key != "" {
			e := t.keys[key]
			e.resp, e.code, e.inFlight = resp, http.StatusCreated, false
		}
		return http.StatusCreated, resp
	}, func(t *tenant) {
		if key != "" {
			delete(t.keys, key) // not processed: the key may be used again
		}
	})
}

func (w *World) createContact(rw http.ResponseWriter, r *http.Request, service string) {
	ns := r.PathValue("ns")
	in, canon, err := readObject(r)
	email := str(in, "email")
	if err != nil || email == "" || str(in, "name") == "" {
		badRequest(rw, "name and email are required")
		return
	}
	name := service + "/" + email
	f := w.begin(ns, name, true, canon)
	if f.kind == fateThrottle {
		w.throttle(rw)
		return
	}
	w.perform(rw, ns, name, f, func(t *tenant, _ *Requests) (int, []byte) {
		c := Contact{Name: str(in, "name"), Email: email, Note: str(in, "note")}
		if service == "leads" {
			c.ID = t.nextID("ld_")
			c.visibleAt = time.Now().Add(f.lag)
			t.leads = append(t.leads, c)
		} else {
			c.ID = t.nextID("ct_")
			t.contacts = append(t.contacts, c)
		}
		resp, _ := json.Marshal(c)
		return http.StatusCreated, resp
	}, nil)
}

func (w *World) search(rw http.ResponseWriter, r *http.Request, service string) {
	ns, note := r.PathValue("ns"), r.URL.Query().Get("note")
	f := w.begin(ns, "search/"+note, false, nil)
	switch f.kind {
	case fateThrottle:
		w.throttle(rw)
		return
	case fateFail:
		writeJSON(rw, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		return
	}
	now := time.Now()
	found := []Contact{}
	w.mu.Lock()
	t := w.tenantLocked(ns)
	list := t.contacts
	if service == "leads" {
		list = t.leads
	}
	for _, c := range list {
		if note != "" && c.Note == note && !now.Before(c.visibleAt) {
			found = append(found, c)
		}
	}
	t.lookups++
	if len(found) > 0 {
		t.lookupHits++
	}
	w.mu.Unlock()
	time.Sleep(f.answer / 2)
	writeJSON(rw, http.StatusOK, found)
}

func (w *World) putSettings(rw http.ResponseWriter, r *http.Request) {
	ns, account := r.PathValue("ns"), r.PathValue("account")
	_, canon, err := readObject(r)
	if err != nil {
		badRequest(rw, "settings must be a JSON object")
		return
	}
	name := "settings/" + account
	f := w.begin(ns, name, true, canon)
	if f.kind == fateThrottle {
		w.throttle(rw)
		return
	}
	w.perform(rw, ns, name, f, func(t *tenant, _ *Requests) (int, []byte) {
		s := t.settings[account]
		if s == nil {
			s = &Setting{}
			t.settings[account] = s
		}
		s.Writes++
		if !bytes.Equal(s.Value, canon) {
			s.Value = canon
			s.Changes++
		}
		resp, _ := json.Marshal(map[string]any{"account": account, "settings": json.RawMessage(canon)})
		return http.StatusOK, resp
	}, nil)
}

func (w *World) sendEmail(rw http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	in, canon, err := readObject(r)
	to, tmpl := str(in, "to"), str(in, "template")
	if err != nil || to == "" || tmpl == "" {
		badRequest(rw, "to and template are required")
		return
	}
	name := "email/" + to + "|" + tmpl
	f := w.begin(ns, name, true, canon)
	if f.kind == fateThrottle {
		w.throttle(rw)
		return
	}
	w.perform(rw, ns, name, f, func(t *tenant, _ *Requests) (int, []byte) {
		e := Email{MessageID: t.nextID("msg_"), To: to, Template: tmpl}
		t.emails = append(t.emails, e)
		resp, _ := json.Marshal(e)
		return http.StatusOK, resp
	}, nil)
}

// audit answers the namespace's Audit. With ?quiet=DURATION it first waits
// (up to that long) until no request is being processed, so that late
// commits have landed.
func (w *World) audit(rw http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if q := r.URL.Query().Get("quiet"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil {
			badRequest(rw, "quiet must be a duration")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		for {
			w.mu.Lock()
			t := w.tenantLocked(ns)
			busy, idle := t.processing > 0, t.idle
			w.mu.Unlock()
			if !busy {
				break
			}
			select {
			case <-idle:
				continue
			case <-ctx.Done():
			}
			break
		}
	}
	a := w.Snapshot(ns)
	if r.URL.Query().Get("log") != "" {
		w.mu.Lock()
		a.Log = append([]Received{}, w.tenantLocked(ns).log...)
		w.mu.Unlock()
	}
	writeJSON(rw, http.StatusOK, a)
}

// Snapshot returns a copy of a namespace's state.
func (w *World) Snapshot(ns string) Audit {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tenantLocked(ns)
	a := Audit{
		Charges:    append([]Charge{}, t.charges...),
		Contacts:   append([]Contact{}, t.contacts...),
		Leads:      append([]Contact{}, t.leads...),
		Settings:   map[string]Setting{},
		Emails:     append([]Email{}, t.emails...),
		Requests:   map[string]Requests{},
		Lookups:    t.lookups,
		LookupHits: t.lookupHits,
		Processing: t.processing,
	}
	for k, v := range t.settings {
		a.Settings[k] = *v
	}
	for k, v := range t.requests {
		a.Requests[k] = *v
	}
	return a
}

// drop forgets a namespace (after the harness audited it).
func (w *World) drop(rw http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	w.mu.Lock()
	delete(w.tenants, ns)
	w.mu.Unlock()
	rw.WriteHeader(http.StatusNoContent)
}

// worldLine starts the line a world process prints when it listens.
const worldLine = "chaos-world listening "

// ServeWorld serves a world with cfg on 127.0.0.1 (a free port) until ctx
// ends or stdin reaches end of file (the harness that started it is gone).
// It first prints "chaos-world listening http://ADDR" on stdout.
func ServeWorld(ctx context.Context, cfg WorldConfig, stdin io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("chaos world: listening: %w", err)
	}
	srv := &http.Server{Handler: NewWorld(cfg), ReadHeaderTimeout: 10 * time.Second}
	if _, err := fmt.Fprintf(stdout, "%shttp://%s\n", worldLine, ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The parent holds our stdin open; when it dies, we stop.
		io.Copy(io.Discard, bufio.NewReader(stdin))
		cancel()
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		srv.Close()
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("chaos world: %w", err)
	}
}
