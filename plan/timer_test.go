package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeTimerFields(t *testing.T) {
	t.Parallel()
	p, err := Decode([]byte(`{"actions":[
		{"id":"invoice","tool":"t","args":{}},
		{"id":"remind","tool":"t","args":{},"depends_on":["invoice"],"after":"2d","not_before":"2026-03-01T09:00:00+01:00"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	nb, after, err := p.Actions[1].Timer()
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC); !nb.Equal(want) || after != 48*time.Hour {
		t.Fatalf("Timer() = %v, %v; want %v, 48h", nb, after, want)
	}
	if p.Actions[0].HasTimer() || !p.Actions[1].HasTimer() {
		t.Fatalf("HasTimer: %v %v", p.Actions[0].HasTimer(), p.Actions[1].HasTimer())
	}
}

func TestDecodeTimerProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, action, field, msg string
	}{
		{"bad time", `"not_before":"tomorrow"`, "not_before", "RFC 3339"},
		{"time without zone", `"not_before":"2026-03-01T09:00:00"`, "not_before", "RFC 3339"},
		{"time not a string", `"not_before":12`, "not_before", "must be a string"},
		{"bad duration", `"after":"soon"`, "after", "bad duration"},
		{"negative duration", `"after":"-1h"`, "after", "negative"},
		{"duration not a string", `"after":3600`, "after", "must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(`{"actions":[{"id":"a1","tool":"t","args":{},` + tc.action + `}]}`))
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("Decode: %v, want one problem", err)
			}
			if errs[0].Action != "a1" || errs[0].Field != tc.field || !strings.Contains(errs[0].Msg, tc.msg) {
				t.Fatalf("problem %+v, want action a1, field %s, message with %q", errs[0], tc.field, tc.msg)
			}
		})
	}
}

func TestHashTimers(t *testing.T) {
	t.Parallel()
	base := Plan{Goal: "g", Actions: []Action{{ID: "a1", Tool: "t", Args: []byte(`{}`)}}}
	h0, err := Hash(&base)
	if err != nil {
		t.Fatal(err)
	}
	// A plan without timers hashes as before timers existed (the digest of
	// the canonical document without the two fields).
	if want := "sha256:" + sha256hex(`{"actions":[{"args":{},"depends_on":[],"id":"a1","tool":"t"}],"goal":"g"}`); h0 != want {
		t.Fatalf("hash without timers = %s, want %s", h0, want)
	}
	with := func(nb, after string) string {
		p := base
		p.Actions = []Action{{ID: "a1", Tool: "t", Args: []byte(`{}`), NotBefore: nb, After: after}}
		h, err := Hash(&p)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if with("", "2d") == h0 || with("2026-03-01T09:00:00Z", "") == h0 || with("", "2d") == with("", "3d") {
		t.Fatal("a timer does not change the hash")
	}
	// Spellings of the same moment and the same duration hash alike.
	if with("2026-03-01T10:00:00+01:00", "48h") != with("2026-03-01T09:00:00Z", "2d") {
		t.Fatal("equal timers written differently hash differently")
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
