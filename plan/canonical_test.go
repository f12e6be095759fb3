package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/keys.golden.json from the current Key")

func TestCanonicalNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"1E0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"}, {"1.000", "1"},
		{"-0", "0"}, {"-0.0", "0"}, {"0e10", "0"},
		{"1.5", "1.5"}, {"-2.25", "-2.25"}, {"0.000001", "0.000001"}, {"0.0000001", "1e-7"},
		{"1e2", "100"}, {"123456789", "123456789"},
		{"9007199254740992", "9007199254740992"}, {"-9007199254740992", "-9007199254740992"},
		{"90071992547409920e-1", "9007199254740992"},
		{"9007199254740991", "9007199254740991"},
		{"1e-400", "0"}, // rounded to the nearest double, as RFC 8785 prescribes
		{"0.10000000000000000001", "0.1"},
	}
	for _, tt := range tests {
		got, err := Canonical([]byte(tt.in))
		if err != nil {
			t.Errorf("Canonical(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestCanonicalRefusesNumbersBeyond2p53(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"9007199254740993", "-9007199254740993", "9007199254740992.5", "9007199254740992.0000001",
		"1e16", "10000000000000000", "1e400", "-1e400", "1e999999999999999999", "12345678901234567890",
		"9.007199254740993e15", "90071992547409921e-1",
	} {
		doc := `{"order":{"ids":[1,` + in + `]}}`
		_, err := Canonical([]byte(doc))
		if !errors.Is(err, ErrNumberRange) {
			t.Errorf("Canonical(%s) error = %v, want ErrNumberRange", doc, err)
			continue
		}
		if !strings.Contains(err.Error(), `"order.ids[1]"`) || !strings.Contains(err.Error(), "send big ids and amounts as strings") {
			t.Errorf("error %q does not name the path and the fix", err)
		}
	}
}

func TestNumberInRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"0", true}, {"-0", true}, {"0.0e-999999999999", true}, {"1e15", true}, {"999999999999999.9", true},
		{"9007199254740992", true}, {"9007199254740992.0", true}, {"900719925474099.2e1", true},
		{"9007199254740992.0001", false}, {"9007199254740993", false}, {"9999999999999999", false},
		{"1000000000000000", true}, {"0.00000000000000000000000000001", true}, {"1e-999999999999", true},
		{"1e+16", false}, {"00", true},
	}
	for _, tt := range tests {
		if got := numberInRange(tt.in); got != tt.ok {
			t.Errorf("numberInRange(%s) = %v, want %v", tt.in, got, tt.ok)
		}
	}
}

func TestCanonicalIgnoresKeyOrderAndWhitespace(t *testing.T) {
	t.Parallel()
	a := []byte(`{"b": [1, 2.0, {"y": true, "x": null}], "a": "é\u00e9\/", "€": {}, "\u0001": ""}`)
	b := []byte("{\n\t\"\\u0001\":\"\",\"€\":{},\n  \"a\":\"\u00e9é/\",\"b\":[1e0,2,{\"x\":null,\"y\":true}]}\n")
	ca, err := Canonical(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Canonical(b)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"\\u0001\":\"\",\"a\":\"éé/\",\"b\":[1,2,{\"x\":null,\"y\":true}],\"€\":{}}"
	if string(ca) != want || string(cb) != want {
		t.Errorf("Canonical:\n a = %s\n b = %s\nwant %s", ca, cb, want)
	}
}

func TestCanonicalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []byte
		is   error
		msg  string
	}{
		{"truncated", []byte(`{"a":[1,2`), ErrInvalidJSON, "truncated"},
		{"trailing", []byte(`{} x`), ErrInvalidJSON, "after the JSON value"},
		{"duplicate key", []byte(`{"a":{"k":1,"k":2}}`), ErrInvalidJSON, `"a" (line 1, column 13): duplicate key "k"`},
		{"non-UTF-8", []byte("{\"a\":\"\xff\"}"), ErrInvalidJSON, "invalid UTF-8 byte 0xff"},
		{"NaN", []byte(`{"a":NaN}`), ErrInvalidJSON, "NaN and Infinity"},
		{"single quotes", []byte(`{'a':1}`), ErrInvalidJSON, "expected a string key"},
		{"leading zero", []byte(`[01]`), ErrInvalidJSON, "leading zeros"},
		{"lone low surrogate", []byte(`["\udc00"]`), ErrInvalidJSON, "lone low surrogate"},
		{"nil", nil, ErrInvalidJSON, "empty input"},
		{"too deep", []byte(strings.Repeat("[", 65) + strings.Repeat("]", 65)), ErrTooDeep, "deeper than 64"},
		{"too large", append(append([]byte(`"`), bytes.Repeat([]byte("x"), MaxDocumentSize)...), '"'), ErrTooLarge, "the limit is 16777216 bytes"},
	}
	for _, tt := range tests {
		_, err := Canonical(tt.in)
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: Canonical error = %v, want %v containing %q", tt.name, err, tt.is, tt.msg)
		}
	}
	// 64 levels are fine.
	if _, err := Canonical([]byte(strings.Repeat("[", 64) + strings.Repeat("]", 64))); err != nil {
		t.Errorf("64 levels: %v", err)
	}
}

func TestKeyInvariance(t *testing.T) {
	t.Parallel()
	base, err := Key("run-1", "a1", "payments.charge", json.RawMessage(`{"amount":1,"currency":"EUR","meta":{"a":[1,2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "dk1_") || len(base) != 4+64 || strings.ToLower(base) != base {
		t.Fatalf("key %q is not dk1_ + 64 lowercase hex digits", base)
	}
	same := []string{
		`{"currency":"EUR","meta":{"a":[1,2]},"amount":1}`,
		"{\n  \"amount\": 1.0,\n  \"currency\": \"EUR\",\n  \"meta\": {\"a\": [1e0, 2]}\n}",
		`{"amount":1e0,"currency":"\u0045UR","meta":{"a":[10e-1,0.2e1]}}`,
	}
	for _, args := range same {
		k, err := Key("run-1", "a1", "payments.charge", json.RawMessage(args))
		if err != nil {
			t.Fatal(err)
		}
		if k != base {
			t.Errorf("Key(%s) = %s, want %s (same value, other spelling)", args, k, base)
		}
	}
	changed := []struct {
		run, action, tool, args string
	}{
		{"run-1", "a1", "payments.charge", `{"amount":2,"currency":"EUR","meta":{"a":[1,2]}}`},
		{"run-1", "a1", "payments.charge", `{"amount":1,"currency":"EUR","meta":{"a":[2,1]}}`},
		{"run-1", "a1", "payments.charge", `{"amount":"1","currency":"EUR","meta":{"a":[1,2]}}`},
		{"run-1", "a1", "payments.charge", `{"amount":1,"currency":"EUR","meta":{"a":[1,2]},"x":null}`},
		{"run-2", "a1", "payments.charge", `{"amount":1,"currency":"EUR","meta":{"a":[1,2]}}`},
		{"run-1", "a2", "payments.charge", `{"amount":1,"currency":"EUR","meta":{"a":[1,2]}}`},
		{"run-1", "a1", "payments.refund", `{"amount":1,"currency":"EUR","meta":{"a":[1,2]}}`},
	}
	for _, c := range changed {
		k, err := Key(c.run, c.action, c.tool, json.RawMessage(c.args))
		if err != nil {
			t.Fatal(err)
		}
		if k == base {
			t.Errorf("Key(%q, %q, %q, %s) equals the base key: a changed input must change the key", c.run, c.action, c.tool, c.args)
		}
	}
}

func TestKeyRefuses(t *testing.T) {
	t.Parallel()
	if _, err := Key("r", "a1", "t", json.RawMessage(`{"id":12345678901234567890}`)); !errors.Is(err, ErrNumberRange) || !strings.Contains(err.Error(), `"id"`) {
		t.Errorf("big integer: err = %v, want ErrNumberRange naming \"id\"", err)
	}
	if _, err := Key("r", "a1", "t", json.RawMessage(`{"id":`)); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("truncated args: err = %v, want ErrInvalidJSON", err)
	}
	if _, err := Key("r", "a1", "t", nil); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("nil args: err = %v, want ErrInvalidJSON", err)
	}
	if _, err := Key("r\xff", "a1", "t", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "run id") {
		t.Errorf("invalid UTF-8 run id: err = %v", err)
	}
	if _, err := Key("r", "a1", "t\xfe", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "tool") {
		t.Errorf("invalid UTF-8 tool: err = %v", err)
	}
}

// goldenKey is one entry of testdata/keys.golden.json. Args is the raw JSON
// text, kept as a string so that its exact spelling is part of the fixture.
type goldenKey struct {
	Name     string `json:"name"`
	RunID    string `json:"run_id"`
	ActionID string `json:"action_id"`
	Tool     string `json:"tool"`
	Args     string `json:"args"`
	Key      string `json:"key"`
}

var goldenInputs = []goldenKey{
	{Name: "empty args", RunID: "run-1", ActionID: "a1", Tool: "t", Args: `{}`},
	{Name: "key order", RunID: "run-1", ActionID: "a1", Tool: "t", Args: `{"b":2,"a":1}`},
	{Name: "whitespace", RunID: "run-1", ActionID: "a1", Tool: "t", Args: "{ \"a\" : 1 ,\n\t\"b\" : 2 }"},
	{Name: "number spellings", RunID: "run-1", ActionID: "a1", Tool: "t", Args: `{"one":1.0,"hundred":1e2,"tenth":0.1,"neg":-0,"max":9007199254740992,"small":0.0000001,"big":1.5e15}`},
	{Name: "unicode", RunID: "run-ü", ActionID: "a_2", Tool: "crm.create_contact", Args: `{"name":"Zoë Ōkubo","city":"東京","emoji":"😀","€":"euro key"}`},
	{Name: "escapes", RunID: "r", ActionID: "a3", Tool: "t", Args: `{"s":"line\nbreak\ttab \"quote\" back\\slash \/ \u0001 \u001f \u007f \u00e9 \ud83d\ude00","html":"<a href='x'>&amp;</a>"}`},
	{Name: "nested", RunID: "r", ActionID: "a4", Tool: "t", Args: `{"order":{"lines":[{"sku":"A-1","qty":2},{"sku":"B-2","qty":1,"opts":{"gift":true,"note":null}}],"total":{"amount":12.5,"currency":"EUR"}}}`},
	{Name: "arrays of everything", RunID: "r", ActionID: "a5", Tool: "t", Args: `{"a":[[],{},[[]],"",0,false,true,null,-1.5e-3]}`},
	{Name: "utf16 key order", RunID: "r", ActionID: "a6", Tool: "t", Args: `{"\ud83d\ude00":1,"\ufb33":2,"a":3,"A":4,"\u00e9":5,"aa":6}`},
	{Name: "nulls kept", RunID: "r", ActionID: "a7", Tool: "t", Args: `{"x":null,"y":[null]}`},
	{Name: "empty strings", RunID: "", ActionID: "a8", Tool: "t", Args: `{"":""}`},
	{Name: "mcp tool name", RunID: "run-2026-11-30", ActionID: "create_contact", Tool: "hubspot.contacts_create", Args: `{"email":"ann@example.com","properties":{"firstname":"Ann"}}`},
	{Name: "compensation id", RunID: "r", ActionID: "a1.undo", Tool: "payments.refund", Args: `{"charge_id":"ch_123","amount":1250}`},
	{Name: "long string", RunID: "r", ActionID: "a9", Tool: "t", Args: `{"text":"` + strings.Repeat("0123456789", 50) + `"}`},
	{Name: "big id as string", RunID: "r", ActionID: "a10", Tool: "t", Args: `{"id":"12345678901234567890"}`},
}

// Keys must be identical across processes, machines and releases: this test
// compares Key with keys recorded in testdata/keys.golden.json. dk1_ is a
// version: a change that makes this test fail changes what every recorded
// key means, so the derivation must get a new prefix (dk2_) instead.
// Regenerate only for new entries: go test ./plan -run TestKeyGolden -update
func TestKeyGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "keys.golden.json")
	if *update {
		out := make([]goldenKey, len(goldenInputs))
		for i, g := range goldenInputs {
			k, err := Key(g.RunID, g.ActionID, g.Tool, json.RawMessage(g.Args))
			if err != nil {
				t.Fatalf("%s: %v", g.Name, err)
			}
			g.Key = k
			out[i] = g
		}
		data, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var golden []goldenKey
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) < 15 {
		t.Fatalf("golden file has %d entries, want at least 15", len(golden))
	}
	for _, g := range golden {
		k, err := Key(g.RunID, g.ActionID, g.Tool, json.RawMessage(g.Args))
		if err != nil {
			t.Errorf("%s: %v", g.Name, err)
			continue
		}
		if k != g.Key {
			t.Errorf("%s: Key = %s, golden %s", g.Name, k, g.Key)
		}
	}
}

// The golden keys are checked independently of Key: sha256 over canonical
// JSON written out by hand, so the golden file cannot merely confirm itself.
func TestKeyGoldenIndependently(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "keys.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden []goldenKey
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, g := range golden {
		byName[g.Name] = g.Key
	}
	handWritten := map[string]string{
		"key order":        `["run-1","a1","t",{"a":1,"b":2}]`,
		"whitespace":       `["run-1","a1","t",{"a":1,"b":2}]`,
		"empty args":       `["run-1","a1","t",{}]`,
		"number spellings": `["run-1","a1","t",{"big":1500000000000000,"hundred":100,"max":9007199254740992,"neg":0,"one":1,"small":1e-7,"tenth":0.1}]`,
		"escapes":          "[\"r\",\"a3\",\"t\",{\"html\":\"<a href='x'>&amp;</a>\",\"s\":\"line\\nbreak\\ttab \\\"quote\\\" back\\\\slash / \\u0001 \\u001f \u007f é 😀\"}]",
		"utf16 key order":  "[\"r\",\"a6\",\"t\",{\"A\":4,\"a\":3,\"aa\":6,\"é\":5,\"😀\":1,\"\ufb33\":2}]",
	}
	for name, canonical := range handWritten {
		sum := sha256.Sum256([]byte(canonical))
		want := "dk1_" + hex.EncodeToString(sum[:])
		if byName[name] != want {
			t.Errorf("%s: golden key %s, but sha256 of the hand-written canonical form %s gives %s", name, byName[name], canonical, want)
		}
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	decode := func(doc string) *Plan {
		t.Helper()
		p, err := Decode([]byte(doc))
		if err != nil {
			t.Fatalf("Decode(%s): %v", doc, err)
		}
		return p
	}
	hash := func(p *Plan) string {
		t.Helper()
		h, err := Hash(p)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	base := hash(decode(`{"goal":"g","actions":[{"id":"a0","tool":"t","args":{}},{"id":"a1","tool":"t","args":{}},{"id":"a2","tool":"pay","args":{"amount":1,"to":"x"},"depends_on":["a0","a1"]}]}`))
	if !strings.HasPrefix(base, "sha256:") || len(base) != 7+64 {
		t.Fatalf("hash %q is not sha256: + 64 hex digits", base)
	}
	same := []string{
		// reformatted, keys reordered, number respelled, depends_on reordered
		"{\n \"actions\": [\n  {\"tool\":\"t\",\"id\":\"a0\",\"args\":{ }},\n  {\"id\":\"a1\",\"tool\":\"t\",\"args\":{},\"depends_on\":[]},\n  {\"depends_on\":[\"a1\",\"a0\"],\"args\":{\"to\":\"x\",\"amount\":1.0},\"id\":\"a2\",\"tool\":\"pay\"}\n ],\n \"goal\": \"g\"\n}",
		// not part of the hash: id, run_id, meta, created_at, transcript, why
		`{"id":"p1","run_id":"r9","meta":{"model":"m"},"created_at":"2026-11-30T00:00:00Z","transcript":[{"role":"tool"}],"goal":"g","actions":[{"id":"a0","tool":"t","args":{},"why":"because"},{"id":"a1","tool":"t","args":{}},{"id":"a2","tool":"pay","args":{"amount":1e0,"to":"x"},"depends_on":["a0","a1"]}]}`,
	}
	for _, doc := range same {
		if h := hash(decode(doc)); h != base {
			t.Errorf("Hash changed under reformatting: %s\n%s", h, doc)
		}
	}
	different := []string{
		`{"goal":"g","actions":[{"id":"a0","tool":"t","args":{}},{"id":"a1","tool":"t","args":{}},{"id":"a2","tool":"pay","args":{"amount":2,"to":"x"},"depends_on":["a0","a1"]}]}`,
		`{"goal":"G","actions":[{"id":"a0","tool":"t","args":{}},{"id":"a1","tool":"t","args":{}},{"id":"a2","tool":"pay","args":{"amount":1,"to":"x"},"depends_on":["a0","a1"]}]}`,
		`{"goal":"g","actions":[{"id":"a1","tool":"t","args":{}},{"id":"a0","tool":"t","args":{}},{"id":"a2","tool":"pay","args":{"amount":1,"to":"x"},"depends_on":["a0","a1"]}]}`,
		`{"goal":"g","actions":[{"id":"a0","tool":"t","args":{}},{"id":"a1","tool":"t","args":{}},{"id":"a2","tool":"pay","args":{"amount":1,"to":"x"},"depends_on":["a0"]}]}`,
		`{"goal":"g","actions":[{"id":"a0","tool":"t","args":{}},{"id":"a1","tool":"t","args":{}},{"id":"a2","tool":"pay2","args":{"amount":1,"to":"x"},"depends_on":["a0","a1"]}]}`,
	}
	for _, doc := range different {
		if h := hash(decode(doc)); h == base {
			t.Errorf("Hash unchanged by a changed plan:\n%s", doc)
		}
	}
	// CreatedAt and Why set in Go do not count either.
	p := decode(`{"goal":"g","actions":[{"id":"a0","tool":"t","args":{}}]}`)
	h1 := hash(p)
	p.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p.Actions[0].Why = "x"
	if hash(p) != h1 {
		t.Error("Hash depends on CreatedAt or Why")
	}
	if _, err := Hash(&Plan{Actions: []Action{{ID: "a", Tool: "t", Args: json.RawMessage(`{"n":1e300}`)}}}); !errors.Is(err, ErrNumberRange) {
		t.Errorf("Hash with a huge number: err = %v, want ErrNumberRange", err)
	}
	if _, err := Hash(nil); err == nil {
		t.Error("Hash(nil) succeeded")
	}
}
