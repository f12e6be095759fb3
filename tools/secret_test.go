package tools

import "testing"

func TestLiteralSecret(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, value string
		secret      bool
	}{
		{"Authorization", "Bearer sk_live_abc", true},
		{"Authorization", `Bearer {{env "PAY_KEY"}}`, false},
		{"Authorization", `Basic {{env "CREDS"}}`, false},
		{"authorization", "sk_live_abc", true},
		{"Proxy-Authorization", "Basic dXNlcjpwYXNz", true},
		{"X-Api-Key", "abc123", true},
		{"X-Api-Key", `{{env "K"}}`, false},
		{"X-Auth-Token", "t0k3n", true},
		{"Cookie", "session=abc", true},
		{"Cookie", `session={{env "S"}}`, false},
		{"X-Client-Secret", "shh", true},
		{"X-Password", "hunter2", true},
		{"Token", `token={{env "T"}}`, false},
		{"X-Signature", "{{.sig}}", false}, // an argument, not the file
		{"Idempotency-Key", "refund-{{key}}", false},
		{"X-Idempotency-Key", "literal", false},
		{"X-Tenant", "acme", false},
		{"Content-Type", "application/json", false},
	}
	for _, c := range cases {
		if got := LiteralSecret(c.name, c.value); got != c.secret {
			t.Errorf("LiteralSecret(%q, %q) = %v, want %v", c.name, c.value, got, c.secret)
		}
		want := c.value
		if c.secret {
			want = Mask
		}
		if got := MaskHeader(c.name, c.value); got != want {
			t.Errorf("MaskHeader(%q, %q) = %q, want %q", c.name, c.value, got, want)
		}
	}
}
