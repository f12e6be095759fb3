package httptool

import (
	"testing"
	"time"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// testEnv is the environment the fixtures are loaded with.
func testEnv(extra map[string]string) func(string) string {
	env := map[string]string{
		"CRM_URL":   "https://crm.example.com/api",
		"CRM_TOKEN": "crm-secret-token-123",
		"PAY_URL":   "https://pay.example.com",
		"PAY_KEY":   "sk_live_paysecret",
		"SMS_URL":   "https://sms.example.com",
	}
	for k, v := range extra {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

func TestLoadValid(t *testing.T) {
	t.Parallel()
	f, err := Load("../toolsfile/testdata/valid/crm.json", testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]tools.Tool{}
	for _, tl := range f.Tools {
		byName[tl.Spec().Name] = tl
	}
	want := map[string]tools.Class{"search_contacts": tools.ReadOnly, "create_contact": tools.Lookup,
		"delete_contact": tools.Idempotent, "charge": tools.Keyed, "refund": tools.Keyed, "send_sms": tools.AtMostOnce}
	if len(byName) != len(want) {
		t.Fatalf("got %d tools", len(byName))
	}
	for name, class := range want {
		tl := byName[name]
		if tl == nil || tl.Spec().Class != class {
			t.Errorf("%s: %v", name, tl)
			continue
		}
		_, looks := tl.(tools.Looker)
		if looks != (name == "create_contact") {
			t.Errorf("%s: implements Looker = %v", name, looks)
		}
	}
	charge := byName["charge"].Spec()
	if charge.Timeout != 20*time.Second || charge.KeyTTL != 24*time.Hour || charge.Approval.Above["amount"] != "100" ||
		charge.Compensate == nil || charge.Compensate.Tool != "refund" || charge.Approval.Always {
		t.Errorf("charge spec = %+v", charge)
	}
	if s := byName["delete_contact"].Spec(); s.Timeout != DefaultTimeout {
		t.Errorf("default timeout = %v", s.Timeout)
	}
	if s := byName["create_contact"].Spec(); s.VisibilityLag != 2*time.Second || len(s.OutputSchema) == 0 || s.Description == "" {
		t.Errorf("create_contact spec = %+v", s)
	}
	if !byName["send_sms"].Spec().Approval.Always {
		t.Error("send_sms: approval always lost")
	}
	if _, err := tools.NewRegistry(f.Tools...); err != nil {
		t.Errorf("the registry refuses a loaded file: %v", err)
	}
	if len(f.MCPServers) != 2 {
		t.Fatalf("MCP servers = %+v", f.MCPServers)
	}
	files := f.MCPServers[0]
	if files.Name != "files" || files.Command != "mcp-files" || len(files.Args) != 2 || !files.TrustAnnotations ||
		files.Tools["write_file"].Effect != tools.Idempotent || files.Tools["write_file"].Timeout != 10*time.Second ||
		!files.Tools["rm"].Approval.Always {
		t.Errorf("files server = %+v", files)
	}
	if f.MCPServers[1].URL != "https://mcp.example.com/mcp" || f.MCPServers[1].Headers["Authorization"] != `Bearer {{env "PAY_KEY"}}` {
		t.Errorf("tickets server = %+v", f.MCPServers[1])
	}
	if h, err := toolsfile.ExpandEnv(f.MCPServers[1].Headers["Authorization"], testEnv(nil)); err != nil || h != "Bearer sk_live_paysecret" {
		t.Errorf("ExpandEnv = %q, %v", h, err)
	}
	for _, name := range []string{"minimal", "empty"} {
		if _, err := Load("../toolsfile/testdata/valid/"+name+".json", testEnv(nil)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
