package ledger

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Schedule is a schedule's record (ScheduleKeeper): when it fires, what
// each firing runs, its policies, and how far it has fired. The ledger
// stores and compares it; executor/schedule interprets Spec, TZ, Overlap
// and CatchUp, and the service's scheduler moves Handled.
type Schedule struct {
	ID string `json:"id"`
	// Spec is when it fires: a cron expression, a macro (@daily) or an
	// interval ("every 15m"), as executor/schedule.Parse reads it.
	Spec string `json:"spec"`
	// TZ is the IANA time zone of a cron Spec ("" is UTC).
	TZ      string `json:"tz,omitempty"`
	Overlap string `json:"overlap"`
	CatchUp string `json:"catch_up"`
	// What a firing runs: a plan document (Plan), or a goal planned by the
	// model when the slot fires (Goal). Approve is the runs' approval
	// policy ("" the service's default).
	Plan    json.RawMessage `json:"plan,omitempty"`
	Goal    string          `json:"goal,omitempty"`
	Approve string          `json:"approve,omitempty"`

	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Paused    bool      `json:"paused"`

	// Handled is the mark: every slot at or before it has been fired or
	// skipped. A new schedule starts at its CreatedAt.
	Handled time.Time `json:"handled"`
	// LastFired is the last slot fired, LastRunID its run's id.
	LastFired time.Time `json:"last_fired,omitzero"`
	LastRunID string    `json:"last_run_id,omitempty"`
	// Skipped counts the slots skipped (overlap, catch-up), LastSkipped
	// is the latest of them.
	Skipped     int64     `json:"skipped"`
	LastSkipped time.Time `json:"last_skipped,omitzero"`
	// LastError says why the last slot that could not fire did not (its
	// plan no longer valid, planning failed); "" once a slot fires.
	LastError string `json:"last_error,omitempty"`

	// Version counts the record's writes (1 once created); SwapSchedule
	// replaces only the version it was given.
	Version int64 `json:"version"`
}

// MaxScheduleBytes caps a schedule's encoded record (its plan, mostly).
const MaxScheduleBytes = 17 << 20

var scheduleIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckSchedule refuses a record no backend stores: an id that is not 1
// to 64 letters, digits, '.', '_' or '-' (starting with a letter or
// digit), an empty Spec, both or neither of Plan and Goal, a record too
// large. Errors wrap ErrInvalid.
func CheckSchedule(s Schedule) error {
	hasPlan := len(s.Plan) > 0 && string(s.Plan) != "null"
	switch {
	case !scheduleIDPattern.MatchString(s.ID):
		return fmt.Errorf("%w: schedule id %q: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, s.ID)
	case s.Spec == "":
		return fmt.Errorf("%w: schedule %s: no spec", ErrInvalid, s.ID)
	case hasPlan == (s.Goal != ""):
		return fmt.Errorf("%w: schedule %s: give either a plan or a goal", ErrInvalid, s.ID)
	case hasPlan && !json.Valid(s.Plan):
		return fmt.Errorf("%w: schedule %s: its plan is not JSON", ErrInvalid, s.ID)
	}
	b, err := EncodeSchedule(s)
	if err != nil {
		return err
	}
	if len(b) > MaxScheduleBytes {
		return fmt.Errorf("%w: schedule %s: %d bytes, at most %d", ErrTooLarge, s.ID, len(b), MaxScheduleBytes)
	}
	return nil
}

// SameDefinition reports whether a and b define the same schedule (the
// same id, spec, zone, policies, what to run and creator), whatever their
// state (paused, marks, version).
func SameDefinition(a, b Schedule) bool {
	return a.ID == b.ID && a.Spec == b.Spec && a.TZ == b.TZ && a.Overlap == b.Overlap && a.CatchUp == b.CatchUp &&
		jsonEqual(a.Plan, b.Plan) && a.Goal == b.Goal && a.Approve == b.Approve && a.CreatedBy == b.CreatedBy
}

// EncodeSchedule is a schedule's stored form (JSON, times in UTC).
func EncodeSchedule(s Schedule) ([]byte, error) {
	s.CreatedAt, s.Handled = s.CreatedAt.UTC(), s.Handled.UTC()
	s.LastFired, s.LastSkipped = s.LastFired.UTC(), s.LastSkipped.UTC()
	return json.Marshal(s)
}

// DecodeSchedule reads EncodeSchedule's form. Errors wrap ErrFormat.
func DecodeSchedule(b []byte) (Schedule, error) {
	var s Schedule
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%w: schedule record: %v", ErrFormat, err)
	}
	return s, nil
}

// SortSchedules orders schedules by id.
func SortSchedules(s []Schedule) {
	slices.SortFunc(s, func(a, b Schedule) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
}

// ScheduleCreate is CreateSchedule's rule for a backend: given what is
// stored under s.ID (found false: nothing), the record to write (write
// false: nothing to write) and to return. Errors: ErrInvalid, ErrTooLarge,
// ErrConflict (another definition is stored).
func ScheduleCreate(stored Schedule, found bool, s Schedule) (out Schedule, write bool, err error) {
	if err := CheckSchedule(s); err != nil {
		return Schedule{}, false, err
	}
	if found {
		if SameDefinition(stored, s) {
			return stored, false, nil
		}
		return stored, false, fmt.Errorf("%w: schedule %s exists with another definition", ErrConflict, s.ID)
	}
	s.Version = 1
	if s.Handled.IsZero() {
		s.Handled = s.CreatedAt
	}
	return s, true, nil
}

// ScheduleSwap is SwapSchedule's rule for a backend: given what is stored
// under s.ID, the record to write. Errors: ErrNotFound, ErrConflict (the
// stored version is not s.Version), ErrInvalid, ErrTooLarge.
func ScheduleSwap(stored Schedule, found bool, s Schedule) (Schedule, error) {
	switch {
	case !found:
		return Schedule{}, fmt.Errorf("%w: schedule %q", ErrNotFound, s.ID)
	case stored.Version != s.Version:
		return Schedule{}, fmt.Errorf("%w: schedule %s is at version %d, not %d (changed meanwhile)", ErrConflict, s.ID, stored.Version, s.Version)
	}
	if err := CheckSchedule(s); err != nil {
		return Schedule{}, err
	}
	s.Version++
	return s, nil
}
