package plan

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	valid := []struct {
		in     string
		action string
		path   []string
	}{
		{"${a1.output}", "a1", []string{}},
		{"${a1.output.id}", "a1", []string{"id"}},
		{"${create_contact.output.items.0.email}", "create_contact", []string{"items", "0", "email"}},
		{"${A-b_9.output.first name}", "A-b_9", []string{"first name"}},
		{"${a1.output.é}", "a1", []string{"é"}},
	}
	for _, tt := range valid {
		ref, ok, err := ParseRef(tt.in)
		if err != nil || !ok {
			t.Errorf("ParseRef(%q) = %v, %v", tt.in, ok, err)
			continue
		}
		if ref.Action != tt.action || !reflect.DeepEqual(ref.Path, tt.path) || ref.Text != tt.in || ref.String() != tt.in {
			t.Errorf("ParseRef(%q) = %+v, want action %q path %q", tt.in, ref, tt.action, tt.path)
		}
	}
	for _, s := range []string{"", "plain text", "$a1.output", "{a1.output}", "$ {a1.output}", "price: $5 {x}"} {
		if _, ok, err := ParseRef(s); ok || err != nil {
			t.Errorf("ParseRef(%q) = %v, %v; want not a reference", s, ok, err)
		}
	}
	invalid := []struct{ in, msg string }{
		{"order ${a1.output.id}", "not exactly one reference"},
		{"${a1.output.id} created", "not exactly one reference"},
		{"${a1.output.id}${a2.output.id}", "not exactly one reference"},
		{"${a1.output.id}}", "braces"},
		{"${a1.output", "not exactly one reference"},
		{"${a1}", "must have the form"},
		{"${a1.result.id}", "must have the form"},
		{"${.output}", "action is empty"},
		{"${a 1.output}", "outside [A-Za-z0-9_-]"},
		{"${a1.output.}", "empty path segment"},
		{"${a1.output..x}", "empty path segment"},
		{"${}", "must have the form"},
		{"${", "not exactly one reference"},
	}
	for _, tt := range invalid {
		_, ok, err := ParseRef(tt.in)
		if !ok || !errors.Is(err, ErrReference) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseRef(%q) = %v, %v; want ErrReference containing %q", tt.in, ok, err, tt.msg)
		}
	}
}

func TestRefs(t *testing.T) {
	t.Parallel()
	refs, err := Refs(json.RawMessage(`{"z":"${a2.output}","a":["x",{"b":"${a1.output.id}"}],"\u0024{":1,"n":"\u0024{a3.output.k}"}`))
	if err == nil {
		t.Fatalf("a key holding \"${\" was accepted: %v", refs)
	}
	refs, err = Refs(json.RawMessage(`{"z":"${a2.output}","a":["x",{"b":"${a1.output.id}"}],"n":"\u0024{a3.output.k}","m":5}`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range refs {
		got = append(got, r.Text)
	}
	want := []string{"${a2.output}", "${a1.output.id}", "${a3.output.k}"} // document order; escapes decoded
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Refs = %q, want %q", got, want)
	}
	if refs, err := Refs(json.RawMessage(`{}`)); err != nil || len(refs) != 0 {
		t.Errorf("Refs({}) = %v, %v", refs, err)
	}
	for _, bad := range []string{`[]`, `{"a":"x ${a1.output}"}`, `{"a":`, `{"a":1e300}`} {
		if _, err := Refs(json.RawMessage(bad)); err == nil {
			t.Errorf("Refs(%s) succeeded", bad)
		}
	}
	_, err = Refs(json.RawMessage(`{"a":[{"b":"see ${a1.output}"}]}`))
	if err == nil || !strings.Contains(err.Error(), `"a[0].b"`) {
		t.Errorf("error %v does not name the path a[0].b", err)
	}
}

func TestResolvePreservesTypes(t *testing.T) {
	t.Parallel()
	outputs := map[string]json.RawMessage{
		"a1": json.RawMessage(` {"id": "cus_1", "count": 3, "price": 12.50, "big": 9007199254740992, "active": true, "none": null,
			"items": [{"sku": "A"}, {"sku": "B", "tags": ["x", "y"]}], "addr": {"city": "Oslo"}, "3": "three"} `),
		"a2": json.RawMessage(`[10, 20]`),
		"a3": json.RawMessage(`"just a string"`),
	}
	tests := []struct{ args, want string }{
		{`{"s":"${a1.output.id}"}`, `{"s":"cus_1"}`},
		{`{"n":"${a1.output.count}"}`, `{"n":3}`},
		{`{"f":"${a1.output.price}"}`, `{"f":12.50}`},
		{`{"b":"${a1.output.big}"}`, `{"b":9007199254740992}`},
		{`{"t":"${a1.output.active}"}`, `{"t":true}`},
		{`{"z":"${a1.output.none}"}`, `{"z":null}`},
		{`{"o":"${a1.output.addr}"}`, `{"o":{"city": "Oslo"}}`},
		{`{"a":"${a1.output.items}"}`, `{"a":[{"sku": "A"}, {"sku": "B", "tags": ["x", "y"]}]}`},
		{`{"i":"${a1.output.items.1.tags.0}"}`, `{"i":"x"}`},
		{`{"k":"${a1.output.3}"}`, `{"k":"three"}`}, // a digit segment is a key on an object
		{`{"w":"${a2.output}", "v": "${a2.output.1}"}`, `{"w":[10, 20], "v": 20}`},
		{`{"x":"${a3.output}"}`, `{"x":"just a string"}`},
		{`{"nested":{"list":["${a2.output.0}", "plain", 7]}, "keep":  "as is"}`, `{"nested":{"list":[10, "plain", 7]}, "keep":  "as is"}`},
		{`{"none": 1}`, `{"none": 1}`},
	}
	for _, tt := range tests {
		got, err := Resolve(json.RawMessage(tt.args), outputs)
		if err != nil {
			t.Errorf("Resolve(%s): %v", tt.args, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Resolve(%s) = %s, want %s", tt.args, got, tt.want)
		}
	}
	// Type preserved through decoding, too: the number stays a json.Number.
	got, err := Resolve(json.RawMessage(`{"n":"${a1.output.count}"}`), outputs)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(got)))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if _, ok := v["n"].(json.Number); !ok {
		t.Errorf("resolved count is %T, want json.Number", v["n"])
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	outputs := map[string]json.RawMessage{
		"a1":  json.RawMessage(`{"id":"cus_1","items":[{"sku":"A"},{"sku":"B"}],"name":"Ann","deep":` + strings.Repeat("[", 60) + strings.Repeat("]", 60) + `,"huge":1e300}`),
		"bad": json.RawMessage(`{"id":`),
	}
	tests := []struct {
		args string
		is   error
		msg  string
	}{
		{`{"x":"${a1.output.items.3}"}`, ErrReference, `${a1.output.items.3}: a1's output at "items" has only 2 items`},
		{`{"x":"${a1.output.missing}"}`, ErrReference, `a1's output has no key "missing"`},
		{`{"x":"${a1.output.items.0.price}"}`, ErrReference, `a1's output at "items.0" has no key "price"`},
		{`{"x":"${a1.output.name.first}"}`, ErrReference, `a1's output at "name" is a string, which has no "first" inside`},
		{`{"x":"${a1.output.items.first}"}`, ErrReference, `a1's output at "items" is an array, and "first" is not an index`},
		{`{"x":"${a1.output.items.01}"}`, ErrReference, `"01" is not an index`},
		{`{"x":{"y":"${a9.output.id}"}}`, ErrReference, `resolve args at "x.y": bad reference: ${a9.output.id}: no output recorded for action a9`},
		{`{"x":"${bad.output.id}"}`, ErrReference, "the recorded output of bad is not valid JSON"},
		{`{"x":"hello ${a1.output.id}"}`, ErrReference, "not exactly one reference"},
		{`{"x":"${a1.output.huge}"}`, ErrNumberRange, "beyond ±2^53"},
		{`{"x":[[[[[[["${a1.output.deep}"]]]]]]]}`, ErrTooDeep, "deeper than 64"},
		{`[1]`, nil, "must be a JSON object, got array"},
		{`{"x":`, ErrInvalidJSON, "truncated"},
	}
	for _, tt := range tests {
		_, err := Resolve(json.RawMessage(tt.args), outputs)
		if err == nil || tt.is != nil && !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Resolve(%s) error = %v, want %v containing %q", tt.args, err, tt.is, tt.msg)
		}
	}
}

func TestResolveThenKeyIgnoresOutputFormatting(t *testing.T) {
	t.Parallel()
	args := json.RawMessage(`{"customer":"${a1.output}","amount":5}`)
	k := func(out string) string {
		t.Helper()
		r, err := Resolve(args, map[string]json.RawMessage{"a1": json.RawMessage(out)})
		if err != nil {
			t.Fatal(err)
		}
		key, err := Key("r", "a2", "pay", r)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	if k(`{"id":"c1","n":1}`) != k("{ \"n\" : 1.0,\n \"id\" : \"c1\" }") {
		t.Error("the key depends on how the referenced output was formatted")
	}
	if k(`{"id":"c1","n":1}`) == k(`{"id":"c2","n":1}`) {
		t.Error("the key ignores the resolved value")
	}
}
