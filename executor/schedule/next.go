package schedule

import "time"

// searchYears bounds the search for a cron expression's next slot: every
// expression Parse accepts fires within a leap-year cycle.
const searchYears = 8

// Next returns the first slot of s strictly after after, in zone loc (nil:
// UTC), or the zero time when there is none (never, for a spec Parse
// returned). Slots are whole seconds (cron ones whole minutes).
func (s *Spec) Next(after time.Time, loc *time.Location) time.Time {
	if s.every > 0 {
		step := int64(s.every / time.Second)
		sec := after.Unix()
		n := sec/step*step + step
		if sec < 0 && sec%step != 0 {
			n -= step
		}
		return time.Unix(n, 0).UTC()
	}
	if loc == nil {
		loc = time.UTC
	}
	// Walk the wall clock (kept in UTC, which has no gaps or repeats) from
	// the minute after after's wall time; the first matching wall time that
	// resolves to an instant after after is the slot. A wall time whose
	// first occurrence is not after after (after lies in a repeated hour)
	// has fired already.
	wall := wallOf(after.In(loc)).Truncate(time.Minute).Add(time.Minute)
	end := wall.AddDate(searchYears, 0, 0)
	for wall.Before(end) {
		w, ok := s.nextWall(wall, end)
		if !ok {
			return time.Time{}
		}
		if t := resolve(w, loc); t.After(after) {
			return t
		}
		wall = w.Add(time.Minute)
	}
	return time.Time{}
}

// Between returns the slots of s in (after, until], oldest first, at most
// limit of them (the oldest limit; more reports whether there were more).
func (s *Spec) Between(after, until time.Time, loc *time.Location, limit int) (slots []time.Time, more bool) {
	for t := s.Next(after, loc); !t.IsZero() && !t.After(until); t = s.Next(t, loc) {
		if len(slots) == limit {
			return slots, true
		}
		slots = append(slots, t)
	}
	return slots, false
}

// nextWall is the first wall time at or after w (in UTC form) that matches
// s, before end.
func (s *Spec) nextWall(w, end time.Time) (time.Time, bool) {
	for w.Before(end) {
		switch {
		case s.month&(1<<uint(w.Month())) == 0:
			w = time.Date(w.Year(), w.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !s.dayMatches(w):
			w = time.Date(w.Year(), w.Month(), w.Day()+1, 0, 0, 0, 0, time.UTC)
		case s.hour&(1<<uint(w.Hour())) == 0:
			w = time.Date(w.Year(), w.Month(), w.Day(), w.Hour()+1, 0, 0, 0, time.UTC)
		case s.minute&(1<<uint(w.Minute())) == 0:
			w = w.Add(time.Minute)
		default:
			return w, true
		}
	}
	return time.Time{}, false
}

// dayMatches applies the Vixie cron rule: when both day fields are
// restricted, either may match; otherwise both must (a '*' matches all).
func (s *Spec) dayMatches(w time.Time) bool {
	dom := s.dom&(1<<uint(w.Day())) != 0
	dow := s.dow&(1<<uint(w.Weekday())) != 0
	if !s.domStar && !s.dowStar {
		return dom || dow
	}
	return dom && dow
}

// wallOf is t's wall-clock reading as a UTC time.
func wallOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// resolve is the instant wall time w (in UTC form) names in loc: its first
// occurrence when it happens twice; when it does not happen (a gap), the
// instant it names with the offset in force before the gap, that is, as
// far past the gap's end as w is past its start.
func resolve(w time.Time, loc *time.Location) time.Time {
	u := w.Unix()
	offBefore := offsetAt(u-2*86400, loc)
	offs := [3]int{offBefore, offsetAt(u, loc), offsetAt(u+2*86400, loc)}
	var best time.Time
	for _, off := range offs {
		t := time.Unix(u-int64(off), 0)
		if offsetAt(t.Unix(), loc) != off {
			continue
		}
		if best.IsZero() || t.Before(best) {
			best = t
		}
	}
	if best.IsZero() {
		best = time.Unix(u-int64(offBefore), 0)
	}
	return best.In(loc)
}

func offsetAt(unix int64, loc *time.Location) int {
	_, off := time.Unix(unix, 0).In(loc).Zone()
	return off
}
