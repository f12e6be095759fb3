package ui

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// Every endpoint is described in openapi.json and every described operation
// exists.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var spec struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &spec); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			described[strings.ToUpper(method)+" "+path] = true
		}
	}
	s := &Server{}
	served := map[string]bool{}
	for _, rt := range s.routeTable() {
		served[rt.method+" "+rt.path] = true
	}
	var missing, extra []string
	for k := range served {
		if !described[k] {
			missing = append(missing, k)
		}
	}
	for k := range described {
		if !served[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("openapi.json lacks %v and describes %v that is not served", missing, extra)
	}
}
