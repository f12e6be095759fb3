package tools

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DecodeJSON decodes one JSON value with numbers as json.Number (never
// through float64, so that a key or an amount stays exact), refusing
// anything after it. The connectors and the tools file use it for arguments,
// bodies and answers.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// JSONKind names the JSON type of a decoded value with its article, for
// messages: "null", "a boolean", "a string", "a number", "an array", "an
// object".
func JSONKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return "a number"
	}
}
