package planner

import (
	"encoding/json"
	"testing"
)

func TestPlaceholder(t *testing.T) {
	t.Parallel()
	got := placeholder("a7", []string{"id", `we"ird`, "ünï"})
	var v struct {
		Queued   bool              `json:"queued"`
		ActionID string            `json:"action_id"`
		Output   string            `json:"output"`
		Fields   map[string]string `json:"fields"`
		Note     string            `json:"note"`
	}
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatalf("placeholder is not JSON: %v\n%s", err, got)
	}
	if !v.Queued || v.ActionID != "a7" || v.Output != "${a7.output}" || v.Fields["id"] != "${a7.output.id}" ||
		v.Fields[`we"ird`] != `${a7.output.we"ird}` || v.Fields["ünï"] != "${a7.output.ünï}" || v.Note == "" {
		t.Errorf("placeholder = %+v", v)
	}
	if got := placeholder("a1", nil); !json.Valid([]byte(got)) {
		t.Errorf("placeholder without fields is not JSON: %s", got)
	}
}
