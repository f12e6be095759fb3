package schedule

import (
	"testing"
	"time"
)

// FuzzParse: no text panics Parse; a spec it accepts has a next slot after
// any instant, strictly later, in every zone tried, and the slot after it
// is later still.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*/15 * * * *", "0 9-17/4 * * mon-fri", "30 2 * * *", "0 0 13 * 5", "@daily", "every 15m", "@every 1s", "5/20 * * 1,6 sun", "0 0 29 2 *"} {
		f.Add(s, int64(1772357400))
	}
	zones := []string{"UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"}
	f.Fuzz(func(t *testing.T, text string, unix int64) {
		s, err := Parse(text)
		if err != nil {
			return
		}
		after := time.Unix(unix%(200*365*86400), 0) // within two centuries of the epoch
		for _, z := range zones {
			loc, err := LoadLocation(z)
			if err != nil {
				t.Fatal(err)
			}
			n := s.Next(after, loc)
			if n.IsZero() || !n.After(after) {
				t.Fatalf("%q in %s: Next(%v) = %v", text, z, after, n)
			}
			if m := s.Next(n, loc); m.IsZero() || !m.After(n) {
				t.Fatalf("%q in %s: Next(%v) = %v", text, z, n, m)
			}
		}
	})
}
