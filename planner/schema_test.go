package planner

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/docketrun/docket/tools"
)

func TestMapNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70)
	names := []string{"crm.create", "crm_create", "mail/send", "ok-name_1", "überweisung.senden", long, long + "y", "a b"}
	m := mapNames(names)
	seen := map[string]string{}
	for _, n := range names {
		w := m.toWire[n]
		if !tools.ValidWireName(w) {
			t.Errorf("%q → %q: not in [a-zA-Z0-9_-]{1,64}", n, w)
		}
		if other, dup := seen[w]; dup {
			t.Errorf("%q and %q both map to %q", n, other, w)
		}
		seen[w] = n
		if back, ok := m.registryName(w); !ok || back != n {
			t.Errorf("%q → %q → %q, %v", n, w, back, ok)
		}
	}
	if m.toWire["ok-name_1"] != "ok-name_1" || m.toWire["crm_create"] != "crm_create" || m.toWire["mail/send"] != "mail_send" {
		t.Errorf("valid names must be kept and simple ones mapped readably: %v", m.toWire)
	}
	if w := m.toWire["crm.create"]; !strings.HasPrefix(w, "crm_create_") || len(w) != len("crm_create_")+8 {
		t.Errorf("collision must get a hash suffix: %q", w)
	}
	// The model may answer with the registry name itself, unless it is another tool's wire name.
	if n, ok := m.registryName("mail/send"); !ok || n != "mail/send" {
		t.Errorf("registry name not accepted: %q %v", n, ok)
	}
	if n, _ := m.registryName("crm_create"); n != "crm_create" {
		t.Errorf("crm_create resolved to %q", n)
	}
	if _, ok := m.registryName("nope"); ok {
		t.Errorf("unknown name accepted")
	}
	// Deterministic whatever the input order.
	rev := make([]string, len(names))
	for i, n := range names {
		rev[len(names)-1-i] = n
	}
	if fmt.Sprint(mapNames(rev).toWire) != fmt.Sprint(m.toWire) {
		t.Errorf("mapping depends on order")
	}
}

func TestStrictSchema(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string // want "" means: not strict, sent unchanged
	}{
		{"required only", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
			`{"additionalProperties":false,"properties":{"a":{"type":"string"}},"required":["a"],"type":"object"}`},
		{"optional becomes nullable", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"a":{"type":"integer","minimum":1},"b":{"type":["string","number"]}}}`,
			`{"additionalProperties":false,"properties":{"a":{"minimum":1,"type":["integer","null"]},"b":{"type":["string","number","null"]}},"required":["a","b"],"type":"object"}`},
		{"enum", `{"type":"object","properties":{"c":{"enum":["x","y"]}}}`,
			`{"additionalProperties":false,"properties":{"c":{"enum":["x","y",null]}},"required":["c"],"type":"object"}`},
		{"const", `{"type":"object","properties":{"c":{"const":"x"}}}`,
			`{"additionalProperties":false,"properties":{"c":{"anyOf":[{"const":"x"},{"type":"null"}]}},"required":["c"],"type":"object"}`},
		{"nested array of objects", `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer"}},"required":["sku"]}}},"required":["items"]}`,
			`{"additionalProperties":false,"properties":{"items":{"items":{"additionalProperties":false,"properties":{"qty":{"type":["integer","null"]},"sku":{"type":"string"}},"required":["qty","sku"],"type":"object"},"type":"array"}},"required":["items"],"type":"object"}`},
		{"no arguments", `{"type":"object","properties":{}}`, `{"additionalProperties":false,"properties":{},"required":[],"type":"object"}`},
		{"anyOf of plain types", `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"number"}]}},"required":["v"]}`,
			`{"additionalProperties":false,"properties":{"v":{"anyOf":[{"type":"string"},{"type":"number"}]}},"required":["v"],"type":"object"}`},
		{"free-form object", `{"type":"object","properties":{"meta":{"type":"object"}}}`, ""},
		{"additionalProperties schema", `{"type":"object","properties":{},"additionalProperties":{"type":"string"}}`, ""},
		{"ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"type":"string"}}}`, ""},
		{"oneOf", `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"number"}]}}}`, ""},
		{"anyOf with optional inside", `{"type":"object","properties":{"a":{"anyOf":[{"type":"object","properties":{"x":{"type":"string"}}},{"type":"string"}]}},"required":["a"]}`, ""},
		{"array without items", `{"type":"object","properties":{"a":{"type":"array"}},"required":["a"]}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, ok, err := strictSchema(json.RawMessage(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if ok || string(out) != tc.in {
					t.Errorf("want non-strict and unchanged, got ok=%v %s", ok, out)
				}
				return
			}
			if !ok {
				t.Fatalf("not strict")
			}
			var a, b any
			json.Unmarshal(out, &a)
			json.Unmarshal([]byte(tc.want), &b)
			ga, _ := json.Marshal(a)
			gb, _ := json.Marshal(b)
			if string(ga) != string(gb) {
				t.Errorf("\n got %s\nwant %s", ga, gb)
			}
		})
	}
}

func TestNormalizeArgs(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","properties":{"a":{"type":"string"},"n":{"type":["string","null"]},"o":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"string"}},"required":["x"]},"l":{"type":"array","items":{"type":"object","properties":{"z":{"type":"string"}}}}},"required":["n","o"]}`
	_, sh, ok, err := strictSchema(json.RawMessage(schema))
	if err != nil || !ok {
		t.Fatalf("strictSchema: %v %v", ok, err)
	}
	cases := []struct{ in, want, err string }{
		{`{"a":null,"n":null,"o":{"x":1,"y":null},"l":[{"z":null},{"z":"k"}]}`, `{"n":null,"o":{"x":1},"l":[{},{"z":"k"}]}`, ""},
		{` {"n": "1e400 stays text", "o": {"x": 9007199254740991}} `, `{"n":"1e400 stays text","o":{"x":9007199254740991}}`, ""},
		{`{"n":null,"o":{"x":1.50,"y":null}}`, `{"n":null,"o":{"x":1.50}}`, ""},
		{`{"n":"<&>","o":{"x":1.50}}`, `{"n":"<&>","o":{"x":1.50}}`, ""},
		{``, `{}`, ""},
		{"{ \"n\" : \"a\\\"b\" ,\n \"o\":{\"x\":[1, null,{}], \"y\" : null},\"\\u0061\":null}", `{"n":"a\"b","o":{"x":[1,null,{}]}}`, ""},
		{`{"a":`, "", "invalid JSON"},
		{`[1]`, "", "must be a JSON object"},
		{`{"x":1,"x":2}`, "", "duplicate"},
		{`{"x":1e300}`, "", "out of range"},
	}
	for _, tc := range cases {
		got, _, err := normalizeArgs(tc.in, sh)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("normalizeArgs(%s) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("normalizeArgs(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
