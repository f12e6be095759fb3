package ledger

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCollectAt(t *testing.T) {
	end := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	h := time.Hour
	for _, tc := range []struct {
		name   string
		r      RunRecord
		global time.Duration
		want   time.Time // zero: never
	}{
		{"running", RunRecord{Run: Run{Status: RunRunning}}, h, time.Time{}},
		{"paused, old", RunRecord{Run: Run{Status: RunPaused}, EndedAt: end}, h, time.Time{}},
		{"ended, no retention", RunRecord{Run: Run{Status: RunCompleted}, EndedAt: end}, 0, time.Time{}},
		{"ended, global", RunRecord{Run: Run{Status: RunFailed}, EndedAt: end}, h, end.Add(h)},
		{"own longer", RunRecord{Run: Run{Status: RunCancelled, Retention: Duration(3 * h)}, EndedAt: end}, h, end.Add(3 * h)},
		{"global longer", RunRecord{Run: Run{Status: RunCompleted, Retention: Duration(h)}, EndedAt: end}, 5 * h, end.Add(5 * h)},
		{"own only", RunRecord{Run: Run{Status: RunCompleted, Retention: Duration(h)}, EndedAt: end}, 0, end.Add(h)},
		{"key protects longer", RunRecord{Run: Run{Status: RunCompleted}, EndedAt: end, KeysUntil: end.Add(48 * h)}, h, end.Add(48 * h)},
		{"key protects shorter", RunRecord{Run: Run{Status: RunCompleted}, EndedAt: end, KeysUntil: end.Add(-h)}, h, end.Add(h)},
		{"ended without an end time", RunRecord{Run: Run{Status: RunCompleted}}, h, time.Time{}},
	} {
		at, ok := CollectAt(tc.r, tc.global)
		if ok != !tc.want.IsZero() || !at.Equal(tc.want) {
			t.Errorf("%s: CollectAt = %v, %v; want %v", tc.name, at, ok, tc.want)
		}
	}
}

func TestRunEndedAt(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	r := RunRecord{Run: Run{Status: RunCompleted}}
	r.ended(now)
	if !r.EndedAt.Equal(now) {
		t.Fatalf("EndedAt = %v", r.EndedAt)
	}
	r.ended(now.Add(time.Hour)) // still ended: kept
	if !r.EndedAt.Equal(now) {
		t.Fatalf("EndedAt moved to %v", r.EndedAt)
	}
	r.Status = RunRunning // replayed
	r.ended(now.Add(2 * time.Hour))
	if !r.EndedAt.IsZero() {
		t.Fatalf("EndedAt of a running run = %v", r.EndedAt)
	}
}

func TestDurationJSON(t *testing.T) {
	for _, d := range []time.Duration{30 * 24 * time.Hour, 36 * time.Hour, 90 * time.Second, 1500 * time.Microsecond, time.Nanosecond} {
		b, err := json.Marshal(Duration(d))
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != d {
			t.Errorf("%v -> %s -> %v, %v", d, b, time.Duration(back), err)
		}
	}
	var n Duration
	if err := json.Unmarshal([]byte(`3600000000000`), &n); err != nil || time.Duration(n) != time.Hour {
		t.Errorf("nanoseconds: %v, %v", time.Duration(n), err)
	}
	if err := json.Unmarshal([]byte(`"soon"`), &n); err == nil {
		t.Error("a bad duration was read")
	}
	if b, _ := json.Marshal(Run{ID: "r", Retention: Duration(30 * 24 * time.Hour)}); !json.Valid(b) || !strings.Contains(string(b), `"retention":"30d"`) {
		t.Errorf("Run JSON: %s", b)
	}
}
