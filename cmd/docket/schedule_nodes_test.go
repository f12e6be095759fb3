package main

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/docketrun/docket/executor/schedule"
)

// scheduleRuns lists the runs schedule id created (from node s), by id.
func scheduleRuns(t *testing.T, s *servedChild, token, id string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/v1/runs?limit=1000", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Runs []struct {
			ID        string `json:"run_id"`
			Status    string `json:"status"`
			CreatedBy string `json:"created_by"`
		} `json:"runs"`
		Next string `json:"next"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || list.Next != "" {
		t.Fatalf("GET /v1/runs: %v (next %q)", err, list.Next)
	}
	out := map[string]string{}
	for _, r := range list.Runs {
		if r.CreatedBy == "schedule:"+id {
			out[r.ID] = r.Status
		}
	}
	return out
}

type scheduleRecord struct {
	CreatedAt time.Time `json:"created_at"`
	Handled   time.Time `json:"handled"`
	LastFired time.Time `json:"last_fired"`
	Skipped   int64     `json:"skipped"`
	Paused    bool      `json:"paused"`
}

// A schedule firing every second on a shared ledger fires each slot once
// across node kills: nodes A and B run the scheduler, A is killed
// (SIGKILL) at a random moment, then B as well; after a downtime node C
// starts and catches up (catch_up all: every missed slot fires, one after
// another with overlap queue). Every slot from the first to the last one
// recorded has exactly one run (its id is the slot's), each performed its
// one charge, and none was skipped.
func TestScheduleAcrossNodeKills(t *testing.T) {
	t.Parallel()
	seed := chaosSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	url, _ := sharedLedger(t)
	w := newChargeWorld(t)
	tools := w.toolsFile(t, t.TempDir())
	const token = "schedule-nodes-test-token"
	args := []string{"--ledger", url, "--tools", tools, "--token", token, "--lease", "2s"}
	a := startServeChild(t, args...)
	b := startServeChild(t, args...)

	body := `{"id": "tick", "spec": "every 1s", "overlap": "queue", "catch_up": "all", "approve": "all",
		"plan": {"goal": "tick", "actions": [{"id": "c", "tool": "charge", "args": {"reference": "tick", "amount": 1}}]}}`
	if status, _, code := a.call(t, "POST", "/v1/schedules", token, body); status != http.StatusCreated {
		t.Fatalf("POST /v1/schedules: %d %s", status, code)
	}
	get := func(s *servedChild) scheduleRecord {
		t.Helper()
		req, _ := http.NewRequest("GET", s.base+"/v1/schedules/tick", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rec scheduleRecord
		if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// waitFired waits until the schedule has fired at least n more slots.
	waitFired := func(s *servedChild, after time.Time, n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if rec := get(s); !rec.LastFired.Before(after.Add(time.Duration(n) * time.Second)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the schedule did not fire %d more slots after %v in time\n%s", n, after, s.output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	created := get(a).CreatedAt
	waitFired(b, created, 1)
	time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	killedA := time.Now()
	waitFired(b, killedA, 3) // B goes on (A's last runs adopted once its lease ends)
	time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedB := time.Now()
	// Downtime: no scheduler runs for a few slots.
	time.Sleep(3 * time.Second)
	c := startServeChild(t, args...)
	startedC := time.Now()
	waitFired(c, startedC, 2) // caught up, and going on
	if status, _, code := c.call(t, "POST", "/v1/schedules/tick/pause", token, `{}`); status != http.StatusOK {
		t.Fatalf("pause: %d %s", status, code)
	}
	rec := get(c)
	if !rec.Paused || rec.Skipped != 0 {
		t.Fatalf("after pausing: %+v; want paused, nothing skipped\nC:\n%s", rec, c.output())
	}

	// Every slot from the first after the schedule's creation to the last
	// fired has one run, named by the slot; a slot being fired when it was
	// paused may have one more. All complete, with one charge each.
	first := created.Truncate(time.Second).Add(time.Second)
	var want []string
	for slot := first; !slot.After(rec.LastFired); slot = slot.Add(time.Second) {
		want = append(want, schedule.RunID("tick", slot))
	}
	extra := schedule.RunID("tick", rec.LastFired.Add(time.Second))
	var got map[string]string
	deadline := time.Now().Add(90 * time.Second)
	for {
		got = scheduleRuns(t, c, token, "tick")
		done := true
		for _, st := range got {
			done = done && st == "completed"
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedule's runs did not all complete: %v\nC:\n%s", got, c.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var missing, unexpected []string
	for _, id := range want {
		if _, ok := got[id]; !ok {
			missing = append(missing, id)
		}
	}
	for id := range got {
		if !slices.Contains(want, id) && id != extra {
			unexpected = append(unexpected, id)
		}
	}
	if len(missing) > 0 || len(unexpected) > 0 {
		t.Fatalf("seed %d: slots without a run %v, runs for no expected slot %v (slots %s..%s)", seed, missing, unexpected, first, rec.LastFired)
	}
	if !rec.LastFired.After(startedC) || !killedB.Before(startedC) {
		t.Fatalf("the last slot fired (%v) is not after C started (%v)", rec.LastFired, startedC)
	}
	if n := w.effectsOf("tick")["tick"]; n != len(got) {
		t.Fatalf("seed %d: %d charges for %d runs; want one each", seed, n, len(got))
	}
	t.Logf("seed %d: %d slots fired once each across SIGKILLs of A (%v after creation) and B, and %v of downtime",
		seed, len(got), killedA.Sub(created).Round(time.Millisecond), startedC.Sub(killedB).Round(time.Millisecond))
}
