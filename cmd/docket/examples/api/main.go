// Command api is a tiny local HTTP API to try docket against: a CRM, a payment
// provider and an email sender, in memory, that count every effect.
//
//	go run ./cmd/docket/examples/api            # listens on 127.0.0.1:8765
//	export EXAMPLE_API=http://127.0.0.1:8765    # what ../tools.json reads
//	curl -s http://127.0.0.1:8765/effects       # how many of each effect happened
//
// Each endpoint behaves like a real provider of one effect class (see
// ../tools.json and the README):
//
//   - POST /customers creates a customer and keeps the "note" it was sent;
//     GET /customers?note=N finds customers by that note. docket puts the
//     action's key in the note and looks before it writes again (lookup).
//   - POST /charges and POST /refunds need an Idempotency-Key header. The
//     provider remembers every key: the same key again answers the stored
//     response without charging again, and while a request with that key is
//     still being processed it answers 409 (keyed). A provider that ran both
//     requests would charge twice, and no client could prevent it.
//   - POST /emails sends an email; it takes no key and cannot be searched, so
//     docket never sends it twice on its own (at_most_once).
//   - POST /steps {"n": N} answers {"n": N+1} at once and remembers the
//     answer per Idempotency-Key (required): a keyed step for measuring
//     docket itself on long chains (the README's "Per action" section).
//
// -slow D makes every write take D before it answers, so a crash or a timeout
// can land while a write is in flight.
//
// Imports: the standard library only.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8765", "address to listen on")
	slow := flag.Duration("slow", 0, "how long each write takes before it answers")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *addr, *slow, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// serve listens on addr, prints where, and serves until ctx is done.
func serve(ctx context.Context, addr string, slow time.Duration, out io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "example API listening on %s\n", base)
	fmt.Fprintf(out, "  export EXAMPLE_API=%s\n", base)
	fmt.Fprintf(out, "  effects so far: curl -s %s/effects\n", base)
	hs := &http.Server{Handler: newAPI(slow).handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

// api is the in-memory state of the three services.
type api struct {
	slow time.Duration

	mu        sync.Mutex
	customers []customer
	keys      map[string]*keyed // "charges/KEY", "refunds/KEY"
	effects   map[string]int    // what happened, per kind
	requests  map[string]int    // what was asked, per kind (retries included)
	next      int
}

type customer struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
	Note  string `json:"note"`
}

// keyed is what the payment provider remembers of one idempotency key.
type keyed struct {
	body   []byte // the request, to refuse the same key with another body
	done   bool
	status int
	answer []byte
}

func newAPI(slow time.Duration) *api {
	return &api{slow: slow, keys: map[string]*keyed{}, effects: map[string]int{}, requests: map[string]int{}}
}

func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /customers", a.createCustomer)
	mux.HandleFunc("GET /customers", a.findCustomers)
	mux.HandleFunc("POST /charges", a.keyedWrite("charges", "ch"))
	mux.HandleFunc("POST /refunds", a.keyedWrite("refunds", "re"))
	mux.HandleFunc("POST /emails", a.sendEmail)
	mux.HandleFunc("POST /steps", a.step)
	mux.HandleFunc("GET /effects", a.counts)
	return mux
}

func (a *api) id(prefix string) string {
	a.next++
	return fmt.Sprintf("%s_%d", prefix, a.next)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// readObject reads a JSON object body.
func readObject(w http.ResponseWriter, r *http.Request) (map[string]any, []byte, bool) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		refuse(w, http.StatusBadRequest, "unreadable body")
		return nil, nil, false
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		refuse(w, http.StatusBadRequest, "the body must be a JSON object")
		return nil, nil, false
	}
	return obj, raw, true
}

// work takes the time -slow says, after the effect was made (as a real
// service commits, then answers).
func (a *api) work() {
	if a.slow > 0 {
		time.Sleep(a.slow)
	}
}

func (a *api) createCustomer(w http.ResponseWriter, r *http.Request) {
	obj, _, ok := readObject(w, r)
	if !ok {
		return
	}
	name, _ := obj["name"].(string)
	email, _ := obj["email"].(string)
	note, _ := obj["note"].(string)
	if name == "" || email == "" {
		refuse(w, http.StatusBadRequest, "name and email are required")
		return
	}
	a.mu.Lock()
	a.requests["customers"]++
	c := customer{ID: a.id("cus"), Name: name, Email: email, Note: note}
	a.customers = append(a.customers, c)
	a.effects["customers"]++
	a.mu.Unlock()
	a.work()
	writeJSON(w, http.StatusCreated, c)
}

// step counts one up, once per Idempotency-Key (a repeated key gets the
// first answer).
func (a *api) step(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var in struct {
		N *int64 `json:"n"`
	}
	if key == "" || json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in) != nil || in.N == nil {
		refuse(w, http.StatusBadRequest, `an Idempotency-Key header and a body {"n": integer} are required`)
		return
	}
	a.mu.Lock()
	a.requests["steps"]++
	k, ok := a.keys["steps/"+key]
	if !ok {
		k = &keyed{done: true, status: http.StatusOK, answer: fmt.Appendf(nil, `{"n":%d}`, *in.N+1)}
		a.keys["steps/"+key] = k
		a.effects["steps"]++
	}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(k.status)
	w.Write(k.answer)
}

func (a *api) findCustomers(w http.ResponseWriter, r *http.Request) {
	note := r.URL.Query().Get("note")
	a.mu.Lock()
	found := []customer{}
	for _, c := range a.customers {
		if note != "" && c.Note == note {
			found = append(found, c)
		}
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, found)
}

// keyedWrite serves a write that honours Idempotency-Key: one effect per key,
// the stored answer for a repeated key, 409 while the key is in flight.
func (a *api) keyedWrite(kind, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			refuse(w, http.StatusBadRequest, "the Idempotency-Key header is required")
			return
		}
		obj, raw, ok := readObject(w, r)
		if !ok {
			return
		}
		a.mu.Lock()
		a.requests[kind]++
		k, seen := a.keys[kind+"/"+key]
		switch {
		case seen && !bytes.Equal(k.body, raw):
			a.mu.Unlock()
			refuse(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with another request")
			return
		case seen && !k.done:
			a.mu.Unlock()
			refuse(w, http.StatusConflict, "a request with this Idempotency-Key is still in flight: retry later")
			return
		case seen:
			a.mu.Unlock()
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(k.status)
			w.Write(k.answer)
			return
		}
		k = &keyed{body: raw}
		a.keys[kind+"/"+key] = k
		obj["id"] = a.id(prefix)
		a.effects[kind]++
		a.mu.Unlock()

		a.work()
		answer, err := json.Marshal(obj)
		if err != nil {
			answer = []byte(`{"error":"encoding"}`)
		}
		a.mu.Lock()
		k.done, k.status, k.answer = true, http.StatusCreated, answer
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(answer)
	}
}

func (a *api) sendEmail(w http.ResponseWriter, r *http.Request) {
	obj, _, ok := readObject(w, r)
	if !ok {
		return
	}
	if to, _ := obj["to"].(string); to == "" {
		refuse(w, http.StatusBadRequest, "to is required")
		return
	}
	a.mu.Lock()
	a.requests["emails"]++
	a.effects["emails"]++
	id := a.id("em")
	a.mu.Unlock()
	a.work()
	writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "to": obj["to"]})
}

// counts answers {"effects": {KIND: N}, "requests": {KIND: N}}: effects are
// what happened (one customer, one charge, one email...), requests what was
// asked, retries included.
func (a *api) counts(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	effects := map[string]int{"customers": 0, "charges": 0, "refunds": 0, "emails": 0}
	for k, v := range a.effects {
		effects[k] = v
	}
	writeJSON(w, http.StatusOK, map[string]any{"effects": effects, "requests": a.requests})
}
