package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// requestTemplate is an HTTP tool's request as the tools file writes it, with
// every {{env "NAME"}} and every header value that types a credential into
// the file (tools.MaskHeader) masked, so the page can preview the request an
// action will send without ever seeing a secret.
type requestTemplate struct {
	Method    string            `json:"method"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers,omitempty"`
	Body      json.RawMessage   `json:"body,omitempty"`
	KeyHeader string            `json:"key_header,omitempty"`
}

var envTemplate = regexp.MustCompile(`\{\{\s*env\s+"[^"]*"\s*\}\}`)

// mask replaces every environment template with a mask.
func mask(s string) string { return envTemplate.ReplaceAllString(s, "••••") }

// parseTemplates reads the request templates of a tools file (nil: none)
// through toolsfile, the format's one parser, without reading the
// environment (the page shows templates, never values).
func parseTemplates(file []byte) (map[string]requestTemplate, error) {
	out := map[string]requestTemplate{}
	if len(file) == 0 {
		return out, nil
	}
	f, err := toolsfile.Parse(file, &toolsfile.Options{NoEnv: true})
	if err != nil {
		return nil, fmt.Errorf("reading request templates: %w", err)
	}
	for _, t := range f.Tools {
		req := t.Request
		rt := requestTemplate{Method: req.Method, URL: mask(req.URL.String()), KeyHeader: t.KeyHeader}
		if len(req.Headers) > 0 {
			rt.Headers = map[string]string{}
			for _, h := range req.Headers {
				rt.Headers[h.Name] = mask(tools.MaskHeader(h.Name, h.Value.String())) // a credential typed into the file, too
			}
		}
		if len(req.BodySrc) > 0 {
			rt.Body = json.RawMessage(mask(string(req.BodySrc)))
			if !json.Valid(rt.Body) {
				rt.Body = nil
			}
		}
		out[t.Spec.Name] = rt
	}
	return out, nil
}

// toolInfo is one tool as GET /v1/tools describes it.
type toolInfo struct {
	Name        string           `json:"name"`
	Description string           `json:"description"`
	Class       string           `json:"class"`
	InputSchema json.RawMessage  `json:"input_schema"`
	Request     *requestTemplate `json:"request,omitempty"`
}

func (s *Server) listTools(w http.ResponseWriter, r *http.Request) {
	out := []toolInfo{}
	for _, name := range s.reg.Names() {
		spec, ok := s.reg.Spec(name)
		if !ok {
			continue
		}
		ti := toolInfo{Name: name, Description: spec.Description, Class: string(spec.Class), InputSchema: spec.InputSchema}
		if rt, ok := s.preview[name]; ok {
			ti.Request = &rt
		}
		out = append(out, ti)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}
