package httptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// A keyed HTTP tool: the key travels in the Idempotency-Key header, the base
// URL and the token come from the environment.
func ExampleParse() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s key=%s body=%s\n", r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), body)
		fmt.Fprint(w, `{"charge": {"id": "ch_1", "amount": 250}}`)
	}))
	defer api.Close()

	file := `{"version": 1, "tools": [{
	  "name": "charge", "effect": "keyed", "key_header": "Idempotency-Key", "key_ttl": "24h",
	  "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}, "amount": {"type": "integer"}}},
	  "request": {"method": "POST", "url": "{{env \"PAY_URL\"}}/customers/{{.customer}}/charges",
	              "headers": {"Authorization": "Bearer {{env \"PAY_KEY\"}}"},
	              "body": {"amount": "{{.amount}}", "description": "docket charge for {{.customer}}"}},
	  "output": "/charge"}]}`
	env := map[string]string{"PAY_URL": api.URL, "PAY_KEY": "sk_test"}
	f, err := httptool.Parse([]byte(file), func(k string) string { return env[k] })
	if err != nil {
		panic(err)
	}
	out, err := f.Tools[0].Call(context.Background(), tools.Call{Key: "dk1_abc", Args: json.RawMessage(`{"customer": "cus 7", "amount": 250}`)})
	fmt.Println(string(out), err)
	// Output:
	// POST /customers/cus 7/charges key=dk1_abc body={"amount":250,"description":"docket charge for cus 7"}
	// {"amount":250,"id":"ch_1"} <nil>
}
