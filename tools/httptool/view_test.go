package httptool

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestViewAndWarnings: a credential typed into the file is warned about
// (without its value) and masked in the tool's view; templates stay as
// written; the shipped example has nothing to warn about.
func TestViewAndWarnings(t *testing.T) {
	t.Parallel()
	f, err := Parse([]byte(`{"version":1,"tools":[{"name":"t","effect":"lookup","input_schema":{"type":"object"},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/x","headers":{"Authorization":"Bearer sk_typed","X-Tenant":"acme"},
	             "body":{"n":"{{key}}","auth":{"password":"hunter2"}}},
	  "lookup":{"method":"GET","url":"{{env \"BASE\"}}/x?n={{key}}","headers":{"X-Api-Key":"{{env \"TOKEN\"}}"},"found":"nonempty","output":"/items"}}]}`),
		func(k string) string { return map[string]string{"BASE": "https://h.example", "TOKEN": secret}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) != 1 || f.Warnings[0].Field != "request.headers.Authorization" || strings.Contains(f.Warnings[0].String(), "sk_typed") {
		t.Fatalf("warnings: %+v", f.Warnings)
	}
	v := f.Tools[0].(*LookupTool).View()
	data, _ := json.Marshal(v)
	for _, s := range []string{"sk_typed", "hunter2", secret} {
		if strings.Contains(string(data), s) {
			t.Errorf("view shows %q: %s", s, data)
		}
	}
	if v.Request.Headers["Authorization"] != "••••" || v.Request.Headers["X-Tenant"] != "acme" ||
		v.Lookup.Headers["X-Api-Key"] != `{{env "TOKEN"}}` || v.Request.URL != `{{env "BASE"}}/x` ||
		string(v.Request.Body) != `{"auth":{"password":"••••"},"n":"{{key}}"}` || len(v.Lookup.Explain) == 0 {
		t.Errorf("view: %s", data)
	}
	ok, err := Load("../toolsfile/testdata/valid/crm.json", testEnv(nil))
	if err != nil || len(ok.Warnings) != 0 {
		t.Errorf("crm.json: %v %+v", err, ok.Warnings)
	}
}
