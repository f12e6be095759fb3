package ui

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Any bytes: decodeReview never panics; what it accepts names its targets
// (approve and reject never reach the executor without actions, an action or
// an explicit all); and a socket message is accepted exactly when its body,
// sent to the op's HTTP endpoint, is, with the same meaning.
func FuzzDecodeReview(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `[]`, `null`, `{"op":"approve"}`, `{"op":"approve","actions":[]}`,
		`{"op":"approve","action":"pay"}`, `{"op":"approve","actions":["pay","mail"]}`,
		`{"op":"approve","all":true}`, `{"op":"approve","all":false,"actions":["a"]}`,
		`{"op":"reject","reason":"no"}`, `{"op":"reject","all":true,"reason":"no"}`,
		`{"op":"edit","action":"a","args":{"x":1}}`, `{"op":"resolve","action":"a","done":null,"skip":true}`,
		`{"op":"resolve","action":"a","retry":true}`, `{"op":"pause","id":"1","run":"r"}`,
		`{"op":"cancel","reason":"x"}`, `{"op":"approve","Action":"pay"}`, `{"op":"approve","action":"pay","action":"mail"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		op, err := decodeReview(data, reviewFrom{})
		if err != nil {
			return
		}
		switch op.Op {
		case "approve":
			if !op.All && len(op.Actions) == 0 {
				t.Fatalf("%s: approve accepted without naming anything", data)
			}
			if op.All && len(op.Actions) > 0 {
				t.Fatalf("%s: approve accepted with all and actions", data)
			}
		case "reject":
			if op.All == (op.Action != "") {
				t.Fatalf("%s: reject accepted with all=%v, action %q", data, op.All, op.Action)
			}
		case "edit", "resolve":
			if op.Action == "" {
				t.Fatalf("%s: %s accepted without an action", data, op.Op)
			}
		}
		// The same request over HTTP: the body without the envelope.
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(data, &fields); err != nil {
			t.Fatalf("%s: accepted but not an object: %v", data, err)
		}
		delete(fields, "op")
		delete(fields, "id")
		delete(fields, "run")
		body, _ := json.Marshal(fields)
		hop, herr := decodeReview(body, reviewFrom{op: op.Op})
		if herr != nil {
			t.Fatalf("%s: accepted on the socket, refused over HTTP as %s: %v", data, body, herr)
		}
		op.ID, op.Run = "", ""
		if !reflect.DeepEqual(normal(op), normal(hop)) {
			t.Fatalf("%s: socket reads %+v, HTTP reads %+v", data, op, hop)
		}
	})
}

// normal drops differences in JSON spacing of raw values.
func normal(op reviewOp) reviewOp {
	compact := func(b json.RawMessage) json.RawMessage {
		if b == nil {
			return nil
		}
		var v any
		if json.Unmarshal(b, &v) != nil {
			return b
		}
		out, _ := json.Marshal(v)
		return out
	}
	op.Args, op.Done = compact(op.Args), compact(op.Done)
	return op
}
