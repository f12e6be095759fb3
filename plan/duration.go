package plan

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads a duration as people write it in plans, tools files
// and flags: a Go duration ("90s", "1h30m") whose units may also include
// "d" (24 hours) and "w" (7 days), as in "30d" or "2d12h". Negative
// durations are refused; so are values past about 290 years.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty duration (want one such as \"30s\", \"2h\" or \"30d\")")
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("bad duration %q (negative)", s)
	}
	rest, days := s, time.Duration(0)
	// Days and weeks come first ("2w3d4h"); what follows is a Go duration.
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i == len(rest) || (rest[i] != 'd' && rest[i] != 'w') {
			break
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		unit := 24 * time.Hour
		if rest[i] == 'w' {
			unit *= 7
		}
		if err != nil || n > int64((1<<63-1)/unit) || days > (1<<63-1)-time.Duration(n)*unit {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		days += time.Duration(n) * unit
		rest = rest[i+1:]
	}
	if rest == "" {
		return days, nil
	}
	d, err := time.ParseDuration(rest)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want one such as \"30s\", \"2h\" or \"30d\")", s)
	}
	if d < 0 || days > (1<<63-1)-d {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return days + d, nil
}

// FormatDuration writes d the way ParseDuration reads it, with whole days
// as "d" ("30d", "2d12h0m0s"), so that a stored duration reads back equal.
func FormatDuration(d time.Duration) string {
	if d < 24*time.Hour || d < 0 {
		return d.String()
	}
	days := d / (24 * time.Hour)
	rest := d - days*24*time.Hour
	if rest == 0 {
		return strconv.FormatInt(int64(days), 10) + "d"
	}
	return strconv.FormatInt(int64(days), 10) + "d" + rest.String()
}
