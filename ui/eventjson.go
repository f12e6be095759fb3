package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/docketrun/docket/ledger"
)

// An event's hash (ledger.ChainHash) covers its data's bytes as the ledger
// holds them. encoding/json re-encodes a json.RawMessage (it removes
// whitespace and escapes <, > and &), so an event written with
// json.Marshal reaches a client with other bytes than were hashed and its
// chain no longer verifies there. Every answer that carries events (GET
// /v1/runs/{id}/events, the WebSockets, the audit download) writes them
// with AppendEventJSON or AppendEventLine instead.

// AppendEventJSON appends ev as JSON in ledger.Event's shape (seq, run_id,
// type, action_id, at, data, hash; empty action_id, data and hash left out)
// with its data byte for byte as the ledger holds it, so that a client can
// verify the event's hash. Data that is not JSON is refused with an error
// (it could not be sent without changing it).
func AppendEventJSON(b []byte, ev ledger.Event) ([]byte, error) {
	return appendEvent(b, ev, false)
}

// AppendEventLine appends ev as one line of JSON Lines, newline included:
// AppendEventJSON, except that line breaks between the tokens of its data
// (JSON keeps them nowhere else) are taken out, with the rest of the
// whitespace between tokens, because a line holds one event. An event whose
// data had line breaks then no longer matches its hash on the line; its
// chain is verified against the ledger's bytes (docket audit --verify, GET
// /v1/runs/{id}/events).
func AppendEventLine(b []byte, ev ledger.Event) ([]byte, error) {
	b, err := appendEvent(b, ev, true)
	if err != nil {
		return b, err
	}
	return append(b, '\n'), nil
}

func appendEvent(b []byte, ev ledger.Event, oneLine bool) ([]byte, error) {
	data := ev.Data
	if len(data) > 0 {
		if !json.Valid(data) {
			return b, fmt.Errorf("event %d of run %s: its data is not JSON", ev.Seq, ev.RunID)
		}
		if oneLine && bytes.ContainsAny(data, "\r\n") {
			var c bytes.Buffer
			if err := json.Compact(&c, data); err != nil {
				return b, fmt.Errorf("event %d of run %s: %w", ev.Seq, ev.RunID, err)
			}
			data = c.Bytes()
		}
	}
	str := func(b []byte, key, s string) []byte {
		q, _ := json.Marshal(s) // a string always encodes
		b = append(b, `,"`+key+`":`...)
		return append(b, q...)
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = str(b, "run_id", ev.RunID)
	b = str(b, "type", string(ev.Type))
	if ev.ActionID != "" {
		b = str(b, "action_id", ev.ActionID)
	}
	at, err := ev.At.MarshalJSON()
	if err != nil {
		return b, fmt.Errorf("event %d of run %s: %w", ev.Seq, ev.RunID, err)
	}
	b = append(b, `,"at":`...)
	b = append(b, at...)
	if len(data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, data...)
	}
	if ev.Hash != "" {
		b = str(b, "hash", ev.Hash)
	}
	return append(b, '}'), nil
}

// writeEvents answers GET /v1/runs/{id}/events: eventList's JSON, each
// event by AppendEventJSON.
func writeEvents(w http.ResponseWriter, l eventList) {
	b := []byte(`{"events":[`)
	for i, ev := range l.Events {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendEventJSON(b, ev); err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "encoding the answer: "+err.Error(), nil)
			return
		}
	}
	b = append(b, `],"last":`...)
	b = strconv.AppendUint(b, l.Last, 10)
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
