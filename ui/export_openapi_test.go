package ui

// OpenAPIDocument is the served OpenAPI document.
func OpenAPIDocument() []byte { return openAPI }
