package ui_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// AppendEventJSON writes ledger.Event's JSON: for data that encoding/json
// leaves as it is, byte for byte what json.Marshal writes; for data it
// would re-encode, the data as stored, so that the event's hash verifies
// from the answer.
func TestAppendEventJSON(t *testing.T) {
	t.Parallel()
	// A field added to ledger.Event must be added to AppendEventJSON too.
	if n := reflect.TypeOf(ledger.Event{}).NumField(); n != 7 {
		t.Fatalf("ledger.Event has %d fields; AppendEventJSON writes 7", n)
	}
	at := time.Date(2026, 5, 4, 3, 2, 1, 123456000, time.FixedZone("x", 3600))
	for _, ev := range []ledger.Event{
		{Seq: 1, RunID: "r", Type: ledger.EventRunCreated, At: at, Data: json.RawMessage(`{"goal":"g \u003c\u0026\u003e","n":1}`), Hash: "sha256:ab"},
		{Seq: 2, RunID: `r"<&>` + "\u2028é", Type: ledger.EventActionClaimed, ActionID: "a\\b", At: at},
		{Seq: 3, RunID: "r", Type: ledger.EventRunCompleted, At: at.UTC(), Data: json.RawMessage(`null`)},
	} {
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ui.AppendEventJSON(nil, ev)
		if err != nil || string(got) != string(want) {
			t.Fatalf("AppendEventJSON = %s, %v\njson.Marshal = %s", got, err, want)
		}
		line, err := ui.AppendEventLine([]byte("x"), ev)
		if err != nil || string(line) != "x"+string(want)+"\n" {
			t.Fatalf("AppendEventLine = %q, %v", line, err)
		}
	}

	stored := "{ \"z\": 1e2,\n \"a\": \"caf\\u00e9 <b>&\u2028\", \"big\": 123456789012345678901234567890,\r\n\t\"o\": {\"b\": 1, \"a\": [1, 2.50]} }"
	ev := ledger.Event{Seq: 4, RunID: "r", Type: ledger.EventActionSucceeded, ActionID: "a", At: at, Data: json.RawMessage(stored)}
	ev.Hash = ledger.ChainHash("", ev)
	got, err := ui.AppendEventJSON(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	var back ledger.Event
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	if string(back.Data) != stored || ledger.ChainHash("", back) != ev.Hash {
		t.Fatalf("the data came back as %s, want %s", back.Data, stored)
	}
	// On one line: every line break is gone, nothing else of the data changed.
	line, err := ui.AppendEventLine(nil, ev)
	if err != nil || strings.Count(string(line), "\n") != 1 || !strings.HasSuffix(string(line), "\n") {
		t.Fatalf("AppendEventLine = %q, %v", line, err)
	}
	if err := json.Unmarshal(line, &back); err != nil {
		t.Fatal(err)
	}
	if want := `{"z":1e2,"a":"caf\u00e9 <b>&` + "\u2028" + `","big":123456789012345678901234567890,"o":{"b":1,"a":[1,2.50]}}`; string(back.Data) != want {
		t.Fatalf("the data on one line is %s, want %s", back.Data, want)
	}

	// Data that is not JSON cannot be sent as it is: an error, not a
	// broken answer.
	for _, bad := range []string{`{"a":`, `{"a":1} x`, `{'a':1}`} {
		ev.Data = json.RawMessage(bad)
		if _, err := ui.AppendEventJSON(nil, ev); err == nil || !strings.Contains(err.Error(), "event 4 of run r") {
			t.Fatalf("data %q: %v", bad, err)
		}
	}
}
