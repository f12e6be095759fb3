package mcpserve_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/docketrun/docket/executor/mcpserve"
)

// FuzzCallHash: the arguments of tools/call are the client's. CallHash
// either refuses them or gives 64 hex digits, and the same JSON value
// written differently (keys reordered, spaces) hashes the same: a retry
// whose client re-encoded its arguments is still the same call.
func FuzzCallHash(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[true,null,"x"]}`, `{"amount": 12.50, "to": "a@b"}`, `{"n": 9007199254740993}`, `[1]`, `{"a":"\u00e9"}`, `not json`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := mcpserve.CallHash("tool", raw)
		if err != nil {
			return
		}
		if len(h) != 64 {
			t.Fatalf("hash %q", h)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("CallHash accepted what encoding/json refuses: %q: %v", raw, err)
		}
		again, err := json.MarshalIndent(v, "", "   ") // another spelling of the same value (map keys sorted)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := mcpserve.CallHash("tool", again)
		if err != nil {
			t.Fatalf("the re-encoded value %q is refused: %v", again, err)
		}
		if h2 != h {
			t.Fatalf("%q and %q hash differently", raw, again)
		}
		if other, _ := mcpserve.CallHash("tool2", raw); other == h {
			t.Fatalf("two tools hash the same arguments alike")
		}
	})
}
