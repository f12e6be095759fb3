package httptool

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/tools"
)

// A keyed POST whose kept-alive connection closes after the server read it,
// before any answer, may have taken effect. Go's HTTP client would send a
// request carrying an Idempotency-Key again on a new connection by itself,
// and a throttling answer to that copy (429: nothing done) would then say
// "not processed" of a call whose first copy was. The tool sends each call
// once: the call's outcome is unknown, and the server sees one copy.
func TestCallIsSentOnceWhenTheConnectionClosesUnanswered(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	b := setup(t, `[{"name":"pay","effect":"keyed","key_header":"Idempotency-Key","input_schema":{"type":"object"},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/charges"}}]`, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1: // a first call, answered: its connection stays open for the next
			w.WriteHeader(201)
			w.Write([]byte(`{"id":"ch_1"}`))
		case 2: // read, maybe committed, then the connection closes unanswered
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default: // a copy sent again: throttled before doing anything
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":"rate limited"}`))
		}
	})
	if _, err := call(t, b.tools["pay"], `{"amount":1}`); err != nil {
		t.Fatal(err)
	}
	_, err := call(t, b.tools["pay"], `{"amount":2}`)
	if got := len(b.requests()); got != 2 {
		t.Errorf("the server received %d requests for 2 calls: the HTTP client sent one again by itself", got)
	}
	if o, _ := tools.Classify(err); err == nil || o != tools.Unknown {
		t.Fatalf("call whose connection closed unanswered: %v (outcome %v), want unknown", err, o)
	}
}

// A request without a body (a keyed DELETE) can still be sent again by Go's
// client; an answer other than 2xx to the copy then leaves the outcome
// unknown.
func TestCallSentAgainWithoutBodyIsUnknown(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	b := setup(t, `[{"name":"del","effect":"keyed","key_header":"Idempotency-Key","input_schema":{"type":"object","properties":{"id":{"type":"string"}}},
	  "request":{"method":"DELETE","url":"{{env \"BASE\"}}/items/{{.id}}"}}]`, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.WriteHeader(204)
		case 2:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	if _, err := call(t, b.tools["del"], `{"id":"a"}`); err != nil {
		t.Fatal(err)
	}
	_, err := call(t, b.tools["del"], `{"id":"b"}`)
	if got := len(b.requests()); got != 3 {
		t.Logf("the server received %d requests (Go's client did not send the DELETE again)", got)
	}
	if o, _ := tools.Classify(err); err == nil || o != tools.Unknown {
		t.Fatalf("a keyed DELETE sent again and answered 429: %v (outcome %v), want unknown", err, o)
	}
}
