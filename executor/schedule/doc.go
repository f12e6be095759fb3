// Package schedule is the time arithmetic of docket's schedules: it parses
// when a schedule fires (a standard 5-field cron expression, a macro such
// as @daily, or an interval such as "every 15m"), lists the slots (the
// instants a schedule fires at) in an IANA time zone, and decides, from the
// facts a scheduler gathers, which slot to fire now and which to skip
// (Decide). It is pure: no I/O, no clock, no logging; the scheduler loop in
// the service (ui) performs what it decides.
//
// It imports only the standard library and plan (for durations). The time
// zone database is embedded (time/tzdata), so a machine without zoneinfo
// files resolves zone names the same way.
//
// Time zones and daylight saving time. A cron slot is a wall-clock time in
// the schedule's zone. A wall-clock time that does not exist (it falls in
// the hour skipped when clocks go forward) fires that many minutes after
// the change, at the instant time.Date gives it: "30 2 * * *" fires at
// 03:30 on the day clocks go from 02:00 to 03:00; slots that land on one
// instant fire once. A wall-clock time that happens twice (the hour
// repeated when clocks go back) fires once, at its first occurrence.
// Intervals are fixed durations, counted from the Unix epoch (so "every
// 15m" fires at :00, :15, :30 and :45 of every hour, "every 1d" at
// midnight UTC), and do not depend on the zone.
package schedule
