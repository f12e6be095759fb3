package schedule

import (
	_ "time/tzdata" // resolve zone names on machines without zoneinfo files

	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docketrun/docket/plan"
)

// ErrBadSpec is wrapped by every error of Parse and LoadLocation.
var ErrBadSpec = errors.New("bad schedule")

// Spec is when a schedule fires: a cron expression or an interval. Its
// zero value is not valid; build one with Parse.
type Spec struct {
	text  string
	every time.Duration // an interval; zero for a cron expression

	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar              bool   // the field starts with '*' (the Vixie cron OR rule)
}

// MinInterval is the shortest interval Parse accepts.
const MinInterval = time.Second

// Parse reads when a schedule fires:
//
//   - a standard 5-field cron expression, "minute hour day-of-month month
//     day-of-week", each field a list ("1,5") of values, ranges ("1-5")
//     and steps ("*/15", "0-30/10", "5/15" is 5-59/15); months may be
//     named jan-dec, days of the week sun-sat (0 and 7 are Sunday). When
//     both day fields are restricted (neither starts with '*'), a day
//     matches when either does, as in Vixie cron;
//   - a macro: @yearly (@annually), @monthly, @weekly, @daily
//     (@midnight), @hourly;
//   - an interval: "@every D" or "every D", D a duration of
//     plan.ParseDuration ("15m", "1h30m", "2d") of whole seconds, at least
//     MinInterval.
//
// Errors wrap ErrBadSpec and say which field is wrong; an expression that
// never fires (e.g. "0 0 30 2 *") is refused too.
func Parse(text string) (*Spec, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return nil, fmt.Errorf("%w: empty (want a cron expression such as \"*/15 * * * *\" or an interval such as \"every 15m\")", ErrBadSpec)
	}
	lower := strings.ToLower(t)
	if rest, ok := strings.CutPrefix(lower, "@every "); ok {
		return parseEvery(t, rest)
	}
	if rest, ok := strings.CutPrefix(lower, "every "); ok {
		return parseEvery(t, rest)
	}
	if strings.HasPrefix(t, "@") {
		m, ok := macros[lower]
		if !ok {
			return nil, fmt.Errorf("%w: unknown macro %q (want @yearly, @monthly, @weekly, @daily, @hourly or @every D)", ErrBadSpec, t)
		}
		s, err := parseCron(m)
		if err != nil {
			return nil, err
		}
		s.text = t
		return s, nil
	}
	s, err := parseCron(t)
	if err != nil {
		return nil, err
	}
	s.text = t
	return s, nil
}

var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

func parseEvery(text, d string) (*Spec, error) {
	dur, err := plan.ParseDuration(strings.TrimSpace(d))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBadSpec, text, err)
	}
	if dur < MinInterval || dur%time.Second != 0 {
		return nil, fmt.Errorf("%w: %q: an interval is whole seconds, at least %v", ErrBadSpec, text, MinInterval)
	}
	return &Spec{text: text, every: dur}, nil
}

type field struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
}

var (
	months = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	days   = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
	fields = [5]field{
		{"minute", 0, 59, nil},
		{"hour", 0, 23, nil},
		{"day of month", 1, 31, nil},
		{"month", 1, 12, months},
		{"day of week", 0, 7, days},
	}
)

func parseCron(text string) (*Spec, error) {
	parts := strings.Fields(text)
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: %q has %d fields, a cron expression has 5 (minute hour day-of-month month day-of-week)", ErrBadSpec, text, len(parts))
	}
	var bits [5]uint64
	for i, p := range parts {
		b, err := fields[i].parse(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %s field %q: %v", ErrBadSpec, text, fields[i].name, p, err)
		}
		bits[i] = b
	}
	if bits[4]&(1<<7) != 0 { // 7 is Sunday too
		bits[4] = bits[4]&^(1<<7) | 1
	}
	s := &Spec{
		minute: bits[0], hour: bits[1], dom: bits[2], month: bits[3], dow: bits[4],
		domStar: strings.HasPrefix(parts[2], "*"), dowStar: strings.HasPrefix(parts[4], "*"),
	}
	// An expression that never fires (the 30th of February) is a mistake.
	probe := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if s.Next(probe, time.UTC).IsZero() {
		return nil, fmt.Errorf("%w: %q never fires", ErrBadSpec, text)
	}
	return s, nil
}

func (f field) parse(p string) (uint64, error) {
	var bits uint64
	for item := range strings.SplitSeq(p, ",") {
		if item == "" {
			return 0, errors.New("empty list item")
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		lo, hi := f.min, f.max
		switch {
		case rng == "*":
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = f.value(a); err != nil {
				return 0, err
			}
			switch {
			case isRange:
				if hi, err = f.value(b); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("range %s runs backwards", rng)
				}
			case !hasStep:
				hi = lo
			}
		}
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > f.max {
				return 0, fmt.Errorf("bad step %q", stepText)
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

func (f field) value(s string) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < f.min || n > f.max {
		return 0, fmt.Errorf("%q is not a value from %d to %d", s, f.min, f.max)
	}
	return n, nil
}

// String is the text the spec was parsed from.
func (s *Spec) String() string { return s.text }

// Interval is the interval of an interval spec, zero for a cron one.
func (s *Spec) Interval() time.Duration { return s.every }

// LoadLocation resolves an IANA zone name ("Europe/Paris"); "" and "UTC"
// are UTC. Errors wrap ErrBadSpec.
func LoadLocation(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Errorf("%w: unknown time zone %q (want an IANA name such as \"Europe/Paris\")", ErrBadSpec, name)
	}
	return loc, nil
}
