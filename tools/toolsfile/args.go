package toolsfile

import (
	"encoding/json"
	"strings"
)

// SendsArgs reports whether the request sends the call's arguments
// themselves as its JSON body: a POST, PUT or PATCH without a body template.
func (r *Request) SendsArgs() bool {
	return r != nil && !r.HasBody && (r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH")
}

// InputNames returns the top-level property names an input schema declares,
// and whether it lets undeclared ones through on purpose: "additionalProperties"
// set to anything but false, "patternProperties", or no "properties" at all
// (a free-form object). A schema that lists properties and says nothing
// more allows others in JSON Schema, but not on purpose: a request that
// sends its arguments as its body refuses them (tools/httptool).
func InputNames(schema json.RawMessage) (declared []string, open bool) {
	var top struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Additional json.RawMessage            `json:"additionalProperties"`
		Pattern    json.RawMessage            `json:"patternProperties"`
	}
	if json.Unmarshal(schema, &top) != nil {
		return nil, false
	}
	for name := range top.Properties {
		declared = append(declared, name)
	}
	open = top.Properties == nil || top.Pattern != nil ||
		(top.Additional != nil && strings.TrimSpace(string(top.Additional)) != "false")
	return declared, open
}

// extraPropsAllowed reports whether the schema allows undeclared properties
// at all (additionalProperties absent or not false).
func extraPropsAllowed(schema json.RawMessage) bool {
	var top struct {
		Additional json.RawMessage `json:"additionalProperties"`
	}
	if json.Unmarshal(schema, &top) != nil {
		return false
	}
	return top.Additional == nil || strings.TrimSpace(string(top.Additional)) != "false"
}
