package tools

import (
	"regexp"
	"strings"
)

// Mask is what a masked value is shown as.
const Mask = "••••"

// credentialWords are the name fragments that make a header (or an
// environment variable of an MCP server) look like it carries a credential.
var credentialWords = []string{"auth", "token", "key", "secret", "pass", "cookie", "credential", "session", "signature"}

// CredentialName reports whether a header or variable name looks like it
// carries a credential (Authorization, X-Api-Key, Cookie, *token*, *secret*,
// *password*, ...). Idempotency-key headers are not credentials.
func CredentialName(name string) bool {
	n := strings.ToLower(name)
	if strings.Contains(n, "idempotency") {
		return false
	}
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// templateAction matches one {{...}} action of a tools-file template.
var templateAction = regexp.MustCompile(`\{\{[^}]*\}\}`)

// authSchemes are words that may stand before a credential without being one.
var authSchemes = []string{"bearer", "basic", "token", "digest", "bot", "apikey", "api-key", "key", "sharedkey", "hmac", "negotiate", "ntlm", "aws4-hmac-sha256"}

// LiteralSecret reports whether value, the template of a header or variable
// called name, types a credential into the tools file: the name looks like a
// credential (CredentialName) and the value holds literal text besides its
// {{...}} templates, an authorization scheme ("Bearer", "Basic", ...) and
// parameter names written before a template ("session=").
// "Bearer {{env \"PAY_KEY\"}}" is not one; "Bearer sk_live_abc" is.
func LiteralSecret(name, value string) bool {
	return len(LiteralSecretWords(name, value)) > 0
}

// LiteralSecretWords returns the words of value that LiteralSecret takes for
// a credential typed into the file ("sk_live_abc" of "Bearer sk_live_abc"),
// for redacting them from errors; nil when name does not look like a
// credential's or value types none.
func LiteralSecretWords(name, value string) []string {
	if !CredentialName(name) {
		return nil
	}
	var out []string
	for _, w := range strings.Fields(templateAction.ReplaceAllString(value, " ")) {
		w = strings.Trim(w, `"',;`)
		if w == "" || strings.HasSuffix(w, "=") || strings.HasSuffix(w, ":") {
			continue // a parameter's name before its template ("session={{env \"S\"}}")
		}
		known := false
		for _, s := range authSchemes {
			if strings.EqualFold(w, s) {
				known = true
				break
			}
		}
		if !known {
			out = append(out, w)
		}
	}
	return out
}

// MaskHeader returns a header's template safe to show: Mask when it types a
// credential into the file (LiteralSecret), else the template as written
// (its {{env "NAME"}} names a variable, not a value).
func MaskHeader(name, value string) string {
	if LiteralSecret(name, value) {
		return Mask
	}
	return value
}
