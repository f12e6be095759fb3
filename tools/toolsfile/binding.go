package toolsfile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"

	"github.com/docketrun/docket/tools"
)

// Bindings: what a tool's spec does not say but what decides where a call
// goes and how it is protected. They feed tools.Registry.Hash, so changing a
// URL, a key header or a lookup is a "tools changed" like changing a class.
// Only the file's templates go in (never an environment value); a header or
// variable named like a credential goes in as a digest of its template, so
// that a credential typed into the file never sits in a Spec in clear.

// requestBinding is a request or lookup block as written.
type requestBinding struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
	Found   string            `json:"found,omitempty"`  // lookups
	Output  string            `json:"output,omitempty"` // lookups
}

type httpBinding struct {
	Kind      string          `json:"kind"` // "http"
	Request   *requestBinding `json:"request"`
	Output    string          `json:"output,omitempty"`
	KeyHeader string          `json:"key_header,omitempty"`
	Lookup    *requestBinding `json:"lookup,omitempty"`
}

func (r *Request) binding() *requestBinding {
	if r == nil {
		return nil
	}
	b := &requestBinding{Method: r.Method, URL: r.URL.String(), Body: r.BodySrc}
	if len(r.Headers) > 0 {
		b.Headers = map[string]string{}
		for _, h := range r.Headers {
			b.Headers[h.Name] = bindingValue(h.Name, h.Value.String())
		}
	}
	return b
}

// binding is the tool's tools.Spec.Binding.
func (d *Tool) binding() json.RawMessage {
	b := httpBinding{Kind: "http", Request: d.Request.binding(), Output: d.Output}
	if d.KeyHeader != "" {
		b.KeyHeader = http.CanonicalHeaderKey(d.KeyHeader)
	}
	if d.Lookup != nil {
		b.Lookup = d.Lookup.Request.binding()
		if b.Lookup != nil {
			b.Lookup.Found, b.Lookup.Output = d.Lookup.Found, d.Lookup.Output
		}
	}
	return mustJSON(b)
}

type mcpBinding struct {
	Kind             string            `json:"kind"` // "mcp"
	Server           string            `json:"server"`
	Command          string            `json:"command,omitempty"`
	Args             []string          `json:"args,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	URL              string            `json:"url,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	TrustAnnotations bool              `json:"trust_annotations,omitempty"`
	Tool             string            `json:"tool"`
	Output           string            `json:"output,omitempty"`
	Lookup           *mcpLookupBinding `json:"lookup,omitempty"`
}

// Binding is the tools.Spec.Binding of the server's tool named tool (its MCP
// name): the server's identity (command, arguments, environment templates,
// or URL and header templates; whether it is trusted for annotations) and
// the file's output and lookup for the tool. The tool's class, durations,
// approval rules and compensation are in its spec already.
func (s MCPServer) Binding(tool string) json.RawMessage {
	b := mcpBinding{Kind: "mcp", Server: s.Name, Command: s.Command, Args: s.Args, URL: s.URL,
		TrustAnnotations: s.TrustAnnotations, Tool: tool}
	if len(s.Env) > 0 {
		b.Env = map[string]string{}
		for k, v := range s.Env {
			b.Env[k] = bindingValue(k, v)
		}
	}
	if len(s.Headers) > 0 {
		b.Headers = map[string]string{}
		for k, v := range s.Headers {
			b.Headers[http.CanonicalHeaderKey(k)] = bindingValue(k, v)
		}
	}
	if t, ok := s.Tools[tool]; ok {
		b.Output = t.Output
		if l := t.Lookup; l != nil {
			b.Lookup = &mcpLookupBinding{Tool: l.Tool, Args: l.Args, Found: l.Found, Output: l.Output}
		}
	}
	return mustJSON(b)
}

type mcpLookupBinding struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
	Found  string          `json:"found"`
	Output string          `json:"output,omitempty"`
}

// bindingValue is a header or variable template as it goes into a binding:
// as written, or a digest of it when the name looks like a credential.
func bindingValue(name, src string) string {
	if !tools.CredentialName(name) {
		return src
	}
	sum := sha256.Sum256([]byte(src))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("toolsfile: encoding a binding: %v", err)) // strings, maps and valid JSON only
	}
	return data
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
