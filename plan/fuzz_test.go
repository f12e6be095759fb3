package plan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecode: decoding never panics, and a plan that decodes survives a
// round trip through encoding/json with the same Hash.
// Seed corpus: testdata/fuzz/FuzzDecode. Run: go test ./plan -fuzz FuzzDecode
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"goal":"g","actions":[{"id":"a1","tool":"t","args":{"x":1.0}},{"id":"a2","tool":"t","args":{"y":"${a1.output.x}"},"depends_on":["a1"]}]}`))
	f.Add([]byte(`{"actions":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		h1, err := Hash(p)
		if err != nil {
			t.Fatalf("Hash of a plan that decoded: %v", err)
		}
		for _, a := range p.Actions {
			if _, err := Key("run", a.ID, a.Tool, a.Args); err != nil {
				t.Fatalf("Key of action %q of a plan that decoded: %v", a.ID, err)
			}
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("re-encoding a decoded plan: %v", err)
		}
		p2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded plan does not decode: %v\n%s", err, again)
		}
		h2, err := Hash(p2)
		if err != nil {
			t.Fatal(err)
		}
		if h1 != h2 {
			t.Fatalf("Hash changed after a round trip: %s vs %s\n%s\n%s", h1, h2, data, again)
		}
	})
}

// FuzzCanonical: canonical form is idempotent and ignores formatting.
// Seed corpus: testdata/fuzz/FuzzCanonical. Run: go test ./plan -fuzz FuzzCanonical
func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`{"b":[1,1.0,1e0],"a":"\u00e9"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c1, err := Canonical(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Canonical accepted input encoding/json calls invalid: %q", data)
		}
		c2, err := Canonical(c1)
		if err != nil {
			t.Fatalf("canonical output refused: %v\n%q", err, c1)
		}
		if !bytes.Equal(c1, c2) {
			t.Fatalf("not idempotent:\n%q\n%q", c1, c2)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, data, "  ", "\t"); err != nil {
			t.Fatalf("json.Indent: %v", err)
		}
		c3, err := Canonical(indented.Bytes())
		if err != nil {
			t.Fatalf("reformatted input refused: %v", err)
		}
		if !bytes.Equal(c1, c3) {
			t.Fatalf("reformatting changed the canonical form:\n%q\n%q", c1, c3)
		}
	})
}
