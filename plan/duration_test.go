package plan

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	day := 24 * time.Hour
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"30s", 30 * time.Second}, {"1h30m", 90 * time.Minute}, {"30d", 30 * day},
		{"2d12h", 2*day + 12*time.Hour}, {"1w", 7 * day}, {"2w3d4h", 17*day + 4*time.Hour},
		{"0", 0}, {"0d", 0}, {"1.5h", 90 * time.Minute},
	} {
		got, err := ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		back, err := ParseDuration(FormatDuration(got))
		if err != nil || back != got {
			t.Errorf("FormatDuration(%v) = %q reads back as %v, %v", got, FormatDuration(got), back, err)
		}
	}
	for _, in := range []string{"", "-1s", "d", "3", "1d-2h", "2x", "1dd", "99999999999999w", "106751d23h47m16.854775808s"} {
		if d, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
		}
	}
}
