// Package report is what the generated client's driver saw, printed by the
// driver as one JSON object and read back by the test: one type for both.
package report

// Report is the driver's output.
type Report struct {
	RunID        string   `json:"run_id"`
	Created      int      `json:"created"`
	Again        int      `json:"again"`
	Waiting      string   `json:"waiting"`
	Inbox        int      `json:"inbox"`
	Status       string   `json:"status"`
	Settled      string   `json:"settled"`
	Actions      []string `json:"actions"`
	PlanActions  int      `json:"plan_actions"`
	Events       int      `json:"events"`
	LastType     string   `json:"last_type"`
	PastEnd      string   `json:"past_end"`
	Listed       bool     `json:"listed"`
	Tools        int      `json:"tools"`
	Health       string   `json:"health"`
	UnknownRun   string   `json:"unknown_run"`
	UnknownCode  int      `json:"unknown_code"`
	SessionWho   string   `json:"session_who"`
	ServerSchema string   `json:"server_schema"`
}
