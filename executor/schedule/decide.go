package schedule

import (
	"fmt"
	"time"
)

// Overlap says what happens to a slot that comes due while the schedule's
// previous run has not ended.
type Overlap string

const (
	// OverlapSkip skips the slot (it is recorded as skipped).
	OverlapSkip Overlap = "skip"
	// OverlapQueue keeps the slot waiting; its run is created once the
	// previous run has ended. At most MaxBacklog slots wait; older ones
	// are skipped.
	OverlapQueue Overlap = "queue"
	// OverlapCancelPrevious cancels the previous run and fires the newest
	// due slot at once (older due slots are skipped).
	OverlapCancelPrevious Overlap = "cancel_previous"
)

// CatchUp says what happens to slots missed while no scheduler ran (the
// service was down): slots due more than the spec's grace (Spec.Grace)
// before the scheduler started.
type CatchUp string

const (
	// CatchUpNone skips every missed slot.
	CatchUpNone CatchUp = "none"
	// CatchUpLatest fires one run for the most recent missed slot (when
	// no newer slot is due) and skips the others.
	CatchUpLatest CatchUp = "latest"
	// CatchUpAll fires every missed slot, oldest first, at most
	// MaxBacklog of them (the most recent ones; older ones are skipped).
	CatchUpAll CatchUp = "all"
)

// Defaults of a schedule's policies.
const (
	DefaultOverlap = OverlapSkip
	DefaultCatchUp = CatchUpLatest
	// MaxBacklog caps the slots that wait (queued behind a running run,
	// or missed and caught up with CatchUpAll).
	MaxBacklog = 100
	// Grace is how long before a scheduler started a slot may have come
	// due and still count as due rather than missed (Spec.Grace: an
	// interval shorter than it is its own grace).
	Grace = time.Minute
)

// ParseOverlap checks an overlap policy ("" is the default).
func ParseOverlap(s string) (Overlap, error) {
	switch o := Overlap(s); o {
	case "":
		return DefaultOverlap, nil
	case OverlapSkip, OverlapQueue, OverlapCancelPrevious:
		return o, nil
	}
	return "", fmt.Errorf("%w: overlap policy %q (want skip, queue or cancel_previous)", ErrBadSpec, s)
}

// ParseCatchUp checks a catch-up policy ("" is the default).
func ParseCatchUp(s string) (CatchUp, error) {
	switch c := CatchUp(s); c {
	case "":
		return DefaultCatchUp, nil
	case CatchUpNone, CatchUpLatest, CatchUpAll:
		return c, nil
	}
	return "", fmt.Errorf("%w: catch-up policy %q (want none, latest or all)", ErrBadSpec, s)
}

// Facts are what a scheduler knows of one schedule when it decides.
type Facts struct {
	// Due are the slots not yet handled (fired or skipped), oldest first,
	// up to now: Spec.Between(handled, now).
	Due []time.Time
	// Started is when this scheduler started: slots due more than
	// Grace before it were missed (nobody was running); later ones were
	// seen by a running scheduler.
	Started time.Time
	// Grace is the spec's (Spec.Grace); zero: the constant Grace.
	Grace time.Duration
	// PrevActive says the schedule's previous run has not ended.
	PrevActive bool
	Overlap    Overlap
	CatchUp    CatchUp
}

// Decision is what to do now. Handled, when not zero, is the new mark:
// every slot at or before it is fired (Fire) or skipped (Skipped).
type Decision struct {
	Fire           time.Time   // the slot to fire now; zero: none
	CancelPrevious bool        // cancel the previous run first
	Skipped        []time.Time // slots given up (recorded as skipped)
	Handled        time.Time   // the new mark (zero: unchanged)
	Waiting        int         // slots left waiting for the previous run to end
}

// Decide says which slot of f.Due to fire now (at most one: the next
// decision sees the run it creates as the previous one), which to skip,
// and how far the mark moves. It is a pure function of f.
func Decide(f Facts) Decision {
	var d Decision
	if len(f.Due) == 0 {
		return d
	}
	// Catch-up: slots missed while nobody ran.
	grace := f.Grace
	if grace <= 0 {
		grace = Grace
	}
	missedBefore := f.Started.Add(-grace)
	var missed, fresh []time.Time
	for _, t := range f.Due {
		if t.Before(missedBefore) {
			missed = append(missed, t)
		} else {
			fresh = append(fresh, t)
		}
	}
	var keep []time.Time
	switch f.CatchUp {
	case CatchUpNone:
		d.Skipped = append(d.Skipped, missed...)
	case CatchUpAll:
		cut := max(0, len(missed)-MaxBacklog)
		d.Skipped = append(d.Skipped, missed[:cut]...)
		keep = missed[cut:]
	default: // latest
		if len(missed) > 0 && len(fresh) == 0 {
			keep = missed[len(missed)-1:]
			d.Skipped = append(d.Skipped, missed[:len(missed)-1]...)
		} else {
			d.Skipped = append(d.Skipped, missed...)
		}
	}
	queue := append(keep, fresh...)
	if len(d.Skipped) > 0 {
		d.Handled = d.Skipped[len(d.Skipped)-1]
	}
	if len(queue) == 0 {
		return d
	}
	if !f.PrevActive {
		d.Fire, d.Handled = queue[0], queue[0]
		d.Waiting = len(queue) - 1
		return d
	}
	switch f.Overlap {
	case OverlapQueue:
		cut := max(0, len(queue)-MaxBacklog)
		if cut > 0 {
			d.Skipped = append(d.Skipped, queue[:cut]...)
			d.Handled = queue[cut-1]
		}
		d.Waiting = len(queue) - cut
	case OverlapCancelPrevious:
		d.Skipped = append(d.Skipped, queue[:len(queue)-1]...)
		d.Fire, d.Handled, d.CancelPrevious = queue[len(queue)-1], queue[len(queue)-1], true
	default: // skip
		d.Skipped = append(d.Skipped, queue...)
		d.Handled = queue[len(queue)-1]
	}
	return d
}

// RunID is the id of the run that fires slot of schedule id: the same on
// every node and after every restart, so the ledger's run ids make one
// slot fire once. It is "sched:ID:" and the slot in UTC
// (20060102T150405Z).
func RunID(id string, slot time.Time) string {
	return "sched:" + id + ":" + slot.UTC().Format("20060102T150405Z")
}

// Check checks a schedule's definition: its spec, zone and policies ("" a
// policy's default), and returns the policies it names. Errors wrap
// ErrBadSpec.
func Check(spec, tz, overlap, catchUp string) (Overlap, CatchUp, error) {
	if _, err := Parse(spec); err != nil {
		return "", "", err
	}
	if _, err := LoadLocation(tz); err != nil {
		return "", "", err
	}
	o, err := ParseOverlap(overlap)
	if err != nil {
		return "", "", err
	}
	c, err := ParseCatchUp(catchUp)
	return o, c, err
}

// Grace is how long before a scheduler started a slot of s may have come
// due and still fire as due rather than be treated as missed: Grace, or
// the interval when that is shorter.
func (s *Spec) Grace() time.Duration {
	if s.every > 0 && s.every < Grace {
		return s.every
	}
	return Grace
}
