package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// groupRuns records runs ids, each with actions a and b (tool t, approved
// by policy), and returns a claim of action id of run.
func groupRuns(t *testing.T, s *postgres.Store, ids ...string) func(run, id string) (ledger.Op, string) {
	t.Helper()
	for _, id := range ids {
		p := &plan.Plan{Goal: "group", Actions: []plan.Action{
			{ID: "a", Tool: "t", Args: json.RawMessage(`{"i":1}`)},
			{ID: "b", Tool: "t", Args: json.RawMessage(`{"i":2}`)},
		}}
		if _, _, err := s.CreateRun(context.Background(), ledger.Run{ID: id, Policy: "all"}, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	return func(run, id string) (ledger.Op, string) {
		args := json.RawMessage(`{"i":1}`)
		if id == "b" {
			args = json.RawMessage(`{"i":2}`)
		}
		k, err := plan.Key(run, id, "t", args)
		if err != nil {
			t.Fatal(err)
		}
		return ledger.Claim(run, id, "t", k, args, 1), k
	}
}

// applied is one Apply's answer.
type applied struct {
	res []ledger.Result
	err error
}

// applyAsync runs an Apply in its own goroutine.
func applyAsync(s *postgres.Store, ops ...ledger.Op) <-chan applied {
	ch := make(chan applied, 1)
	go func() {
		res, err := s.Apply(context.Background(), ops...)
		ch <- applied{res, err}
	}()
	return ch
}

// waitFor polls cond until it holds (a state to reach, not a time).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for tries := 0; !cond(); tries++ {
		if tries == 6000 {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// blockedBy counts the backends waiting on a lock that backend pid holds.
func blockedBy(t *testing.T, pid uint32) int {
	t.Helper()
	ctx := context.Background()
	conn := rawConn(t)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Applies that arrive while every writer is busy commit together, in one
// transaction, each evaluated after the ones before it: an outcome queued
// behind its own claim succeeds in the same group, and every Apply gets its
// own results.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir()) // a new one for every run of the test
	s := open(t, postgres.Config{Schema: schema, Writers: 1})
	claim := groupRuns(t, s, "g0", "g1", "g2", "g3", "g4")

	// The one writer waits on run g0's row, held by another transaction.
	hold, holder := holdRow(t, schema, "g0")
	first, _ := claim("g0", "a")
	firstDone := applyAsync(s, first)
	waitFor(t, "the first Apply to wait on the held row", func() bool { return blockedBy(t, holder) > 0 })

	// Queued in this order: a claim, then the outcome of that claim, then
	// claims of three other runs.
	cb, kb := claim("g1", "b")
	var queued []<-chan applied
	for i, ops := range [][]ledger.Op{
		{cb},
		{ledger.Succeed(kb, 1, json.RawMessage(`{"ok":true}`))},
		{func() ledger.Op { o, _ := claim("g2", "a"); return o }()},
		{func() ledger.Op { o, _ := claim("g3", "a"); return o }()},
		{func() ledger.Op { o, _ := claim("g4", "a"); return o }(), func() ledger.Op { o, _ := claim("g4", "b"); return o }()},
	} {
		queued = append(queued, applyAsync(s, ops...))
		waitFor(t, fmt.Sprintf("Apply %d to queue", i), func() bool { return s.PendingApplies() == i+1 })
	}
	hold()
	if a := <-firstDone; a.err != nil || a.res[0].Err != nil {
		t.Fatalf("first Apply: %v %+v", a.err, a.res)
	}
	for i, ch := range queued {
		a := <-ch
		if a.err != nil {
			t.Fatalf("Apply %d: %v", i, a.err)
		}
		for j, r := range a.res {
			if r.Err != nil {
				t.Errorf("Apply %d op %d: %v", i, j, r.Err)
			}
		}
		if i == 4 && len(a.res) != 2 {
			t.Errorf("Apply 4: %d results, want 2", len(a.res))
		}
	}
	if groups, applies, fallbacks := s.GroupCounts(); groups != 1 || applies != 5 || fallbacks != 0 {
		t.Fatalf("group commits %d of %d Applies, %d run again one by one; want 1 of 5, 0", groups, applies, fallbacks)
	}
	rec, err := s.Key(ctx, kb)
	if err != nil || rec.State != ledger.StatusSucceeded {
		t.Fatalf("g1/b after its claim and outcome in one group: %+v %v", rec, err)
	}
	for _, run := range []string{"g2", "g3", "g4"} {
		d, err := s.Doc(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if d.Actions[0].Status != ledger.StatusClaimed {
			t.Errorf("%s/a: %s, want claimed", run, d.Actions[0].Status)
		}
	}
}

// An Apply waiting for a group returns when its context ends, with the
// context's error and nothing written: it leaves the queue (without that,
// it waited for a writer to come free, however long that took). The Applies
// queued with it commit as before.
func TestGroupWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir()) // a new one for every run of the test
	s := open(t, postgres.Config{Schema: schema, Writers: 1})
	claim := groupRuns(t, s, "w0", "w1", "w2")

	hold, holder := holdRow(t, schema, "w0")
	first, _ := claim("w0", "a")
	firstDone := applyAsync(s, first)
	waitFor(t, "the first Apply to wait on the held row", func() bool { return blockedBy(t, holder) > 0 })

	waiting, cancel := context.WithCancel(ctx)
	defer cancel()
	c1, k1 := claim("w1", "a")
	gaveUp := make(chan applied, 1)
	go func() {
		res, err := s.Apply(waiting, c1)
		gaveUp <- applied{res, err}
	}()
	waitFor(t, "the Apply to queue", func() bool { return s.PendingApplies() == 1 })
	c2, k2 := claim("w2", "a")
	other := applyAsync(s, c2)
	waitFor(t, "the second Apply to queue", func() bool { return s.PendingApplies() == 2 })

	cancel()
	select {
	case a := <-gaveUp:
		if !errors.Is(a.err, context.Canceled) || len(a.res) != 1 || !errors.Is(a.res[0].Err, context.Canceled) {
			t.Fatalf("an Apply whose context ended while it waited: %v %+v", a.err, a.res)
		}
	case <-time.After(30 * time.Second): // a guard against a hang, not a speed assertion
		t.Fatalf("an Apply whose context ended still waited for a writer after 30s")
	}
	if n := s.PendingApplies(); n != 1 {
		t.Fatalf("%d Applies queued after one gave up, want 1", n)
	}

	hold()
	if a := <-firstDone; a.err != nil || a.res[0].Err != nil {
		t.Fatalf("first Apply: %v %+v", a.err, a.res)
	}
	if a := <-other; a.err != nil || a.res[0].Err != nil {
		t.Fatalf("the Apply queued with it: %v %+v", a.err, a.res)
	}
	if rec, err := s.Key(ctx, k2); err != nil || rec.State != ledger.StatusClaimed {
		t.Fatalf("w2/a: %+v %v, want claimed", rec, err)
	}
	if _, err := s.Key(ctx, k1); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the key of the Apply that gave up: %v, want not found (nothing written)", err)
	}
	// It can be made again.
	if res, err := s.Apply(ctx, c1); err != nil || res[0].Err != nil {
		t.Fatalf("the claim again: %v %+v", err, res)
	}
}

// A group that loses a race as a whole (a first claim of a key another
// transaction inserted meanwhile) runs its Applies again one by one: the
// others commit, and the one that lost learns what the winner recorded.
func TestGroupLostRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir()) // a new one for every run of the test
	s := open(t, postgres.Config{Schema: schema, Writers: 1})
	claim := groupRuns(t, s, "g0", "g1", "g2", "g3")

	// Another writer inserts g1/a's key and does not commit yet.
	c1, k1 := claim("g1", "a")
	other := rawConn(t)
	if _, err := other.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "keys"}.Sanitize()+` (key, run_id, action_id, tool, state, attempt, owner,
		claimed_at, error, retryable, updated_at, first_claimed_at, maybe_took_effect, failure)
		VALUES ($1, 'g1', 'a', 't', 'claimed', 1, 'inc_other', now(), '', false, now(), now(), false, '')`, k1); err != nil {
		t.Fatal(err)
	}

	hold, holder := holdRow(t, schema, "g0")
	first, _ := claim("g0", "a")
	firstDone := applyAsync(s, first)
	waitFor(t, "the first Apply to wait on the held row", func() bool { return blockedBy(t, holder) > 0 })
	var queued []<-chan applied
	for i, run := range []string{"g2", "g1", "g3"} {
		o := c1
		if run != "g1" {
			o, _ = claim(run, "a")
		}
		queued = append(queued, applyAsync(s, o))
		waitFor(t, fmt.Sprintf("Apply %d to queue", i), func() bool { return s.PendingApplies() == i+1 })
	}
	hold()
	if a := <-firstDone; a.err != nil || a.res[0].Err != nil {
		t.Fatalf("first Apply: %v %+v", a.err, a.res)
	}
	// The group's insert of g1/a's key now waits on the other writer's.
	waitFor(t, "the group to wait on the other insert", func() bool { return blockedBy(t, other.PgConn().PID()) > 0 })
	if _, err := other.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	for i, ch := range queued {
		a := <-ch
		if a.err != nil {
			t.Fatalf("Apply %d: %v", i, a.err)
		}
		if i != 1 && a.res[0].Err != nil {
			t.Errorf("Apply %d: %v", i, a.res[0].Err)
		}
		if i == 1 && a.res[0].Err == nil {
			t.Errorf("the claim of a key another node holds succeeded: %+v", a.res[0])
		}
	}
	if groups, _, fallbacks := s.GroupCounts(); groups != 0 || fallbacks != 1 {
		t.Fatalf("%d group commits, %d run again one by one; want 0 and 1", groups, fallbacks)
	}
	rec, err := s.Key(ctx, k1)
	if err != nil || rec.Owner != "inc_other" {
		t.Fatalf("g1/a's key: %+v %v, want the other writer's claim", rec, err)
	}
}

// Many Applies at once on a few runs, with one writer so that most of them
// commit in groups: every claim of an action is won once (the second of two
// racing claims is refused, in a group or not), every outcome is recorded,
// and each run's events are gap-free with one claim and one outcome per
// action.
func TestGroupCommitUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name() + t.TempDir()), Writers: 1})
	const runs, actions, racers = 6, 12, 2
	for r := range runs {
		p := &plan.Plan{Goal: "load"}
		for a := range actions {
			p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", a), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, a))})
		}
		if _, _, err := s.CreateRun(ctx, ledger.Run{ID: fmt.Sprintf("l%d", r), Policy: "all"}, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	type job struct{ run, action string }
	var jobs []job
	for r := range runs {
		for a := range actions {
			jobs = append(jobs, job{fmt.Sprintf("l%d", r), fmt.Sprintf("a%d", a)})
		}
	}
	wins := make([]atomic.Int32, len(jobs))
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs)*racers)
	for i, j := range jobs {
		for range racers { // two claims of every action race
			wg.Go(func() {
				args := json.RawMessage(fmt.Sprintf(`{"i":%s}`, strings.TrimPrefix(j.action, "a")))
				k, err := plan.Key(j.run, j.action, "t", args)
				if err != nil {
					errs <- err
					return
				}
				res, err := s.Apply(ctx, ledger.Claim(j.run, j.action, "t", k, args, 1))
				if err != nil {
					errs <- err
					return
				}
				if res[0].Err != nil {
					return // the other claim won
				}
				wins[i].Add(1)
				if res, err := s.Apply(ctx, ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`))); err != nil || res[0].Err != nil {
					errs <- fmt.Errorf("outcome of %s/%s: %v %+v", j.run, j.action, err, res)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, j := range jobs {
		if n := wins[i].Load(); n != 1 {
			t.Errorf("%s/%s: %d claims won, want 1", j.run, j.action, n)
		}
	}
	for r := range runs {
		id := fmt.Sprintf("l%d", r)
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for i, ev := range evs {
			if ev.Seq != uint64(i+1) {
				t.Fatalf("%s: event %d has seq %d", id, i, ev.Seq)
			}
			count[string(ev.Type)+" "+ev.ActionID]++
		}
		for a := range actions {
			for _, typ := range []string{"action.claimed", "action.succeeded"} {
				if n := count[fmt.Sprintf("%s a%d", typ, a)]; n != 1 {
					t.Errorf("%s a%d: %d %s events, want 1", id, a, n, typ)
				}
			}
		}
	}
	groups, applies, _ := s.GroupCounts()
	t.Logf("%d group commits held %d of the Applies", groups, applies)
	if groups == 0 {
		t.Fatal("no Applies were committed in a group")
	}
}
