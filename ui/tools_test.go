package ui

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestToolPreviewMasksCredentials: the request preview that GET /v1/tools
// serves masks a credential typed into the tools file as well as every
// {{env "NAME"}}, and keeps what is not a secret.
func TestToolPreviewMasksCredentials(t *testing.T) {
	t.Parallel()
	file := `{"version":1,"tools":[{"name":"pay","request":{"method":"post","url":"{{env \"PAY_URL\"}}/charges",
	  "headers":{"Authorization":"Bearer sk_live_typed_in","X-Api-Key":"{{env \"PAY_KEY\"}}","Idempotency-Key":"pay-{{key}}","X-Tenant":"acme"}}}]}`
	got, err := parseTemplates([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(got)
	if strings.Contains(string(data), "sk_live_typed_in") {
		t.Fatalf("a typed-in credential is shown: %s", data)
	}
	want := map[string]string{"Authorization": "••••", "X-Api-Key": "••••", "Idempotency-Key": "pay-{{key}}", "X-Tenant": "acme"}
	for k, v := range want {
		if got["pay"].Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, got["pay"].Headers[k], v)
		}
	}
	if got["pay"].URL != "••••/charges" {
		t.Errorf("url = %q", got["pay"].URL)
	}
}
