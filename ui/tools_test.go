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
	file := `{"version":1,"tools":[{"name":"pay","effect":"keyed","input_schema":{"type":"object"},
	  "request":{"method":"POST","url":"{{env \"PAY_URL\"}}/charges",
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
	if got["pay"].URL != "••••/charges" || got["pay"].Method != "POST" {
		t.Errorf("url = %q, method %q", got["pay"].URL, got["pay"].Method)
	}
}

// TestToolPreviewIsTheToolsFileParser: the preview comes from the one
// tools-file parser, so a file it refuses is refused here too, saying where.
func TestToolPreviewIsTheToolsFileParser(t *testing.T) {
	t.Parallel()
	_, err := parseTemplates([]byte(`{"version":1,"tools":[{"name":"pay","effect":"sometimes","input_schema":{"type":"object"},
	  "request":{"method":"POST","url":"https://pay.example/charges"}}]}`))
	if err == nil || !strings.Contains(err.Error(), `tool "pay": effect: unknown effect "sometimes"`) {
		t.Fatalf("error = %v", err)
	}
}
