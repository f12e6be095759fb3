package schedule

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "*/x * * * *", "1,,2 * * * *",
		"* * * foo *", "@reboot", "@every", "@every 0s", "every 500ms", "every 1.5s", "every -1m",
		"0 0 30 2 *", "0 0 31 4,6,9,11 *",
	} {
		if s, err := Parse(text); !errors.Is(err, ErrBadSpec) {
			t.Errorf("Parse(%q) = %v, %v; want ErrBadSpec", text, s, err)
		}
	}
}

// TestNext: each case lists the first slots after from, in the zone.
func TestNext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec, tz, from string
		want           []string // RFC 3339 in the zone
	}{
		{"*/15 * * * *", "UTC", "2026-01-01T10:07:00Z", []string{"2026-01-01T10:15:00Z", "2026-01-01T10:30:00Z", "2026-01-01T10:45:00Z", "2026-01-01T11:00:00Z"}},
		{"*/15 * * * *", "UTC", "2026-01-01T10:15:00Z", []string{"2026-01-01T10:30:00Z"}}, // strictly after
		{"0 9-17/4 * * mon-fri", "UTC", "2026-01-02T12:00:00Z", []string{"2026-01-02T13:00:00Z", "2026-01-02T17:00:00Z", "2026-01-05T09:00:00Z"}},
		{"30 2 1,15 * *", "UTC", "2026-01-01T03:00:00Z", []string{"2026-01-15T02:30:00Z", "2026-02-01T02:30:00Z"}},
		{"0 0 * jan,JUL *", "UTC", "2026-01-31T00:00:00Z", []string{"2026-07-01T00:00:00Z"}},
		{"0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		// Vixie OR rule: both day fields restricted: the 13th or any Friday.
		{"0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", []string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}},
		// A '*' day field: AND (here: only the 13th, when dow is */1).
		{"0 0 13 * */1", "UTC", "2026-02-01T00:00:00Z", []string{"2026-02-13T00:00:00Z", "2026-03-13T00:00:00Z"}},
		{"0 0 * * 7", "UTC", "2026-02-01T00:00:00Z", []string{"2026-02-08T00:00:00Z"}}, // 7 is Sunday
		{"0 0 * * sun", "UTC", "2026-02-01T00:00:00Z", []string{"2026-02-08T00:00:00Z"}},
		{"5/20 * * * *", "UTC", "2026-01-01T10:00:00Z", []string{"2026-01-01T10:05:00Z", "2026-01-01T10:25:00Z", "2026-01-01T10:45:00Z", "2026-01-01T11:05:00Z"}},
		{"@hourly", "UTC", "2026-01-01T10:00:00Z", []string{"2026-01-01T11:00:00Z"}},
		{"@daily", "UTC", "2026-01-01T10:00:00Z", []string{"2026-01-02T00:00:00Z"}},
		{"@weekly", "UTC", "2026-01-01T10:00:00Z", []string{"2026-01-04T00:00:00Z"}},
		{"@monthly", "UTC", "2026-01-01T10:00:00Z", []string{"2026-02-01T00:00:00Z"}},
		{"@yearly", "UTC", "2026-01-01T10:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"0 9 * * *", "Asia/Tokyo", "2025-12-31T20:00:00Z", []string{"2026-01-01T09:00:00+09:00", "2026-01-02T09:00:00+09:00"}},
		// Intervals count from the epoch, whatever the zone.
		{"every 15m", "Asia/Kolkata", "2026-01-01T10:07:00Z", []string{"2026-01-01T15:45:00+05:30", "2026-01-01T16:00:00+05:30"}},
		{"@every 1s", "UTC", "2026-01-01T10:00:00.5Z", []string{"2026-01-01T10:00:01Z", "2026-01-01T10:00:02Z"}},
		{"every 1d", "UTC", "2026-01-01T10:00:00Z", []string{"2026-01-02T00:00:00Z"}},
		{"every 7m", "UTC", "1969-12-31T23:59:00Z", []string{"1970-01-01T00:00:00Z", "1970-01-01T00:07:00Z"}},
		// Clocks go forward in New York on 2026-03-08 at 02:00 (to 03:00):
		// 02:30 does not exist and fires at 03:30 EDT, once.
		{"30 2 * * *", "America/New_York", "2026-03-07T12:00:00-05:00", []string{"2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"*/30 * * * *", "America/New_York", "2026-03-08T01:00:00-05:00", []string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00", "2026-03-08T04:00:00-04:00"}},
		// Clocks go back on 2026-11-01 at 02:00 (to 01:00): 01:30 happens
		// twice and fires once, at the first.
		{"30 1 * * *", "America/New_York", "2026-10-31T12:00:00-04:00", []string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"0,30 * * * *", "America/New_York", "2026-11-01T00:45:00-04:00", []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T02:00:00-05:00"}},
		// Starting inside the repeated hour (second pass): its wall times fired already.
		{"0,30 * * * *", "America/New_York", "2026-11-01T01:10:00-05:00", []string{"2026-11-01T02:00:00-05:00"}},
		// Lord Howe Island moves by 30 minutes.
		{"15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00+10:30", []string{"2026-10-04T02:45:00+11:00", "2026-10-05T02:15:00+11:00"}},
	}
	for _, c := range cases {
		s, err := Parse(c.spec)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.spec, err)
		}
		loc := mustLoc(t, c.tz)
		from, err := time.Parse(time.RFC3339Nano, c.from)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		at := from
		for range c.want {
			at = s.Next(at, loc)
			got = append(got, at.In(loc).Format(time.RFC3339))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q in %s after %s:\n got %v\nwant %v", c.spec, c.tz, c.from, got, c.want)
		}
	}
}

func TestBetween(t *testing.T) {
	t.Parallel()
	s, _ := Parse("every 1m")
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got, more := s.Between(from, from.Add(5*time.Minute), time.UTC, 10)
	if len(got) != 5 || more || !got[4].Equal(from.Add(5*time.Minute)) {
		t.Fatalf("Between = %v, more %v", got, more)
	}
	got, more = s.Between(from, from.Add(5*time.Minute), time.UTC, 3)
	if len(got) != 3 || !more {
		t.Fatalf("Between with limit 3 = %v, more %v", got, more)
	}
}

func TestLoadLocation(t *testing.T) {
	t.Parallel()
	if loc, err := LoadLocation(""); err != nil || loc != time.UTC {
		t.Fatalf("LoadLocation(\"\") = %v, %v", loc, err)
	}
	for _, bad := range []string{"Mars/Olympus", "Local", "../etc/passwd"} {
		if _, err := LoadLocation(bad); !errors.Is(err, ErrBadSpec) {
			t.Errorf("LoadLocation(%q) = %v; want ErrBadSpec", bad, err)
		}
	}
}

func TestRunID(t *testing.T) {
	t.Parallel()
	slot := time.Date(2026, 3, 8, 3, 30, 0, 0, time.FixedZone("EDT", -4*3600))
	if got, want := RunID("nightly", slot), "sched:nightly:20260308T073000Z"; got != want {
		t.Fatalf("RunID = %q; want %q", got, want)
	}
}
