package schedule

import (
	"slices"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m := func(mins ...int) []time.Time {
		var ts []time.Time
		for _, n := range mins {
			ts = append(ts, base.Add(time.Duration(n)*time.Minute))
		}
		return ts
	}
	at := func(n int) time.Time { return base.Add(time.Duration(n) * time.Minute) }
	started := at(60) // slots before minute 59 (Grace) were missed
	cases := []struct {
		name string
		f    Facts
		want Decision
	}{
		{"nothing due", Facts{Started: started}, Decision{}},
		{"one due, on time", Facts{Due: m(61), Started: started}, Decision{Fire: at(61), Handled: at(61)}},
		{"within grace of the start is not missed", Facts{Due: m(59), Started: started, CatchUp: CatchUpNone}, Decision{Fire: at(59), Handled: at(59)}},
		{"seen while running: all fire in turn", Facts{Due: m(61, 62, 63), Started: started, CatchUp: CatchUpNone}, Decision{Fire: at(61), Handled: at(61), Waiting: 2}},

		{"none skips missed slots", Facts{Due: m(10, 20, 30), Started: started, CatchUp: CatchUpNone}, Decision{Skipped: m(10, 20, 30), Handled: at(30)}},
		{"none skips missed, fires fresh", Facts{Due: m(10, 20, 61), Started: started, CatchUp: CatchUpNone}, Decision{Skipped: m(10, 20), Fire: at(61), Handled: at(61)}},
		{"latest fires the most recent missed", Facts{Due: m(10, 20, 30), Started: started, CatchUp: CatchUpLatest}, Decision{Skipped: m(10, 20), Fire: at(30), Handled: at(30)}},
		{"latest: a fresh slot supersedes the missed", Facts{Due: m(10, 20, 61), Started: started, CatchUp: CatchUpLatest}, Decision{Skipped: m(10, 20), Fire: at(61), Handled: at(61)}},
		{"all fires the oldest missed first", Facts{Due: m(10, 20, 30), Started: started, CatchUp: CatchUpAll}, Decision{Fire: at(10), Handled: at(10), Waiting: 2}},

		{"skip: previous running", Facts{Due: m(61), Started: started, PrevActive: true, Overlap: OverlapSkip}, Decision{Skipped: m(61), Handled: at(61)}},
		{"skip: previous running, missed and fresh", Facts{Due: m(10, 61, 62), Started: started, PrevActive: true, Overlap: OverlapSkip, CatchUp: CatchUpNone}, Decision{Skipped: m(10, 61, 62), Handled: at(62)}},
		{"queue: waits", Facts{Due: m(61, 62), Started: started, PrevActive: true, Overlap: OverlapQueue}, Decision{Waiting: 2}},
		{"queue: waits, missed skipped first", Facts{Due: m(10, 61), Started: started, PrevActive: true, Overlap: OverlapQueue, CatchUp: CatchUpNone}, Decision{Skipped: m(10), Handled: at(10), Waiting: 1}},
		{"queue: previous ended", Facts{Due: m(61, 62), Started: started, Overlap: OverlapQueue}, Decision{Fire: at(61), Handled: at(61), Waiting: 1}},
		{"cancel_previous: newest fires", Facts{Due: m(61, 62), Started: started, PrevActive: true, Overlap: OverlapCancelPrevious}, Decision{Skipped: m(61), Fire: at(62), Handled: at(62), CancelPrevious: true}},
		{"cancel_previous: previous ended", Facts{Due: m(61), Started: started, Overlap: OverlapCancelPrevious}, Decision{Fire: at(61), Handled: at(61)}},
	}
	for _, c := range cases {
		got := Decide(c.f)
		if !got.Fire.Equal(c.want.Fire) || !got.Handled.Equal(c.want.Handled) || got.CancelPrevious != c.want.CancelPrevious ||
			got.Waiting != c.want.Waiting || !slices.EqualFunc(got.Skipped, c.want.Skipped, time.Time.Equal) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestDecideCaps(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var due []time.Time
	for i := range MaxBacklog + 50 {
		due = append(due, base.Add(time.Duration(i)*time.Minute))
	}
	started := base.Add(time.Duration(len(due)+10) * time.Minute)
	d := Decide(Facts{Due: due, Started: started, CatchUp: CatchUpAll})
	if len(d.Skipped) != 50 || !d.Fire.Equal(due[50]) || d.Waiting != MaxBacklog-1 {
		t.Fatalf("all past the cap: fire %v, skipped %d, waiting %d", d.Fire, len(d.Skipped), d.Waiting)
	}
	d = Decide(Facts{Due: due, Started: base, PrevActive: true, Overlap: OverlapQueue})
	if len(d.Skipped) != 50 || !d.Handled.Equal(due[49]) || d.Waiting != MaxBacklog || !d.Fire.IsZero() {
		t.Fatalf("queue past the cap: %+v", d)
	}
}

func TestParsePolicies(t *testing.T) {
	t.Parallel()
	if o, err := ParseOverlap(""); err != nil || o != DefaultOverlap {
		t.Fatalf("ParseOverlap(\"\") = %v, %v", o, err)
	}
	if c, err := ParseCatchUp(""); err != nil || c != DefaultCatchUp {
		t.Fatalf("ParseCatchUp(\"\") = %v, %v", c, err)
	}
	if _, err := ParseOverlap("allow"); err == nil {
		t.Fatal("ParseOverlap(allow) accepted")
	}
	if _, err := ParseCatchUp("some"); err == nil {
		t.Fatal("ParseCatchUp(some) accepted")
	}
}

// An interval shorter than Grace is its own grace: after a few seconds of
// downtime, a schedule every second has missed slots.
func TestDecideIntervalGrace(t *testing.T) {
	t.Parallel()
	s, err := Parse("every 1s")
	if err != nil {
		t.Fatal(err)
	}
	if s.Grace() != time.Second {
		t.Fatalf("Grace of every 1s = %v", s.Grace())
	}
	if d, _ := Parse("@daily"); d.Grace() != Grace {
		t.Fatalf("Grace of @daily = %v", d.Grace())
	}
	started := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	var due []time.Time
	for i := 1; i <= 10; i++ {
		due = append(due, started.Add(time.Duration(i-10)*time.Second))
	}
	d := Decide(Facts{Due: due, Started: started, Grace: s.Grace(), CatchUp: CatchUpNone})
	// Slots up to started-1s are in grace: the last two (9s and 10s).
	if len(d.Skipped) != 8 || !d.Fire.Equal(due[8]) {
		t.Fatalf("fire %v, skipped %d; want the slot at 9s fired and 8 skipped", d.Fire, len(d.Skipped))
	}
}
