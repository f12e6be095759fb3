package main

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/docketrun/docket/tools/httptool"
)

// endpoint is the loopback HTTP service both sides call, in the parent
// process so that neither side's memory or CPU includes it.
type endpoint struct {
	URL   string
	srv   *http.Server
	posts atomic.Int64 // requests served so far
	keys  atomic.Int64 // ... of which carried an Idempotency-Key
}

func startEndpoint() (*endpoint, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &endpoint{URL: "http://" + l.Addr().String()}
	e.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		io.Copy(io.Discard, r.Body)
		e.posts.Add(1)
		if r.Header.Get("Idempotency-Key") != "" {
			e.keys.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})}
	go e.srv.Serve(l)
	return e, nil
}

func (e *endpoint) Close() error { return e.srv.Close() }

// newHTTPClient is the DBOS side's client, configured like docket's HTTP
// tools: a clone of the default transport keeping as many idle connections
// per host as tools/httptool's default client.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = httptool.DefaultMaxIdleConnsPerHost
	return &http.Client{Transport: t}
}
