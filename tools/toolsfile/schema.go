package toolsfile

import _ "embed"

//go:embed toolsfile.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) of the tools file. It checks
// structure; Parse checks more (templates against input schemas, environment
// variables, compensation targets).
func Schema() []byte { return append([]byte(nil), schemaJSON...) }
