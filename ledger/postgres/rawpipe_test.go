package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// A step's commit is written by the package itself (rawpipe.go), not by
// pgx's SendBatch, and records the same as SendBatch does, a document read
// in the commit included; with it turned off, SendBatch takes every
// pipeline. Not parallel: it turns the raw
// pipelines off for a while, for every store of the process.
func TestRawPipelineTaken(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name() + t.TempDir())})
	ids := []string{"on", "off"}
	claim := groupRuns(t, s, ids...)
	defer postgres.RawPipelines(true)
	for _, id := range ids {
		on := id == "on"
		postgres.RawPipelines(on)
		before := postgres.RawSends()
		op, key := claim(id, "a")
		if res, err := s.Apply(ctx, op); err != nil || res[0].Err != nil {
			t.Fatalf("claim (raw pipelines %s): %v %+v", id, err, res)
		}
		if res, err := s.Apply(ctx, ledger.Succeed(key, 1, json.RawMessage(`{"ok":true}`))); err != nil || res[0].Err != nil {
			t.Fatalf("outcome (raw pipelines %s): %v %+v", id, err, res)
		}
		// The commit that ends a run reads its document in the same pipeline.
		res, doc, err := s.ApplyDoc(ctx, id, ledger.SetRunStatus(id, ledger.RunFailed, ledger.EventRunFailed, "b failed", nil))
		if err != nil || res[0].Err != nil {
			t.Fatalf("run status with its document (raw pipelines %s): %v %+v", id, err, res)
		}
		if n := postgres.RawSends() - before; on != (n >= 3) || !on && n != 0 {
			t.Errorf("raw pipelines %s: %d written by the package, want %s", id, n, map[bool]string{true: "all three commits", false: "none"}[on])
		}
		if doc.Run.Status != ledger.RunFailed || len(doc.Actions) != 2 || doc.Actions[0].Status != ledger.StatusSucceeded ||
			string(doc.Actions[0].Output) != `{"ok":true}` || doc.Actions[1].Status != ledger.StatusPending {
			t.Errorf("raw pipelines %s: document %+v, want the run failed, a succeeded with its output, b pending", id, doc)
		}
		acts, err := s.Actions(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if acts[0].Status != ledger.StatusSucceeded || acts[0].Attempts != 1 {
			t.Errorf("raw pipelines %s: action a is %s after %d attempts, want succeeded after 1", id, acts[0].Status, acts[0].Attempts)
		}
		k, err := s.Key(ctx, key)
		if err != nil || k.State != ledger.StatusSucceeded || string(k.Output) != `{"ok":true}` {
			t.Errorf("raw pipelines %s: key %+v %v, want succeeded with its output", id, k, err)
		}
	}

	// A pipeline whose parameters pass 32 KiB (an outcome's large output)
	// takes SendBatch, whose slow-write timer guards a write that could block.
	postgres.RawPipelines(true)
	big := groupRuns(t, s, "big")
	op, key := big("big", "a")
	if res, err := s.Apply(ctx, op); err != nil || res[0].Err != nil {
		t.Fatalf("claim (big): %v %+v", err, res)
	}
	out := json.RawMessage(`{"blob":"` + strings.Repeat("x", 40<<10) + `"}`)
	before := postgres.RawSends()
	if res, err := s.Apply(ctx, ledger.Succeed(key, 1, out)); err != nil || res[0].Err != nil {
		t.Fatalf("outcome (big): %v %+v", err, res)
	}
	if n := postgres.RawSends() - before; n != 0 {
		t.Errorf("an outcome of %d bytes: %d pipelines written by the package, want none (SendBatch)", len(out), n)
	}
	if k, err := s.Key(ctx, key); err != nil || string(k.Output) != string(out) {
		t.Errorf("the big outcome read back: %d bytes, %v", len(k.Output), err)
	}
}

// A context that ends while a commit's pipeline waits for a lock ends the
// Apply at once, with the context's error and saying that the commit's
// outcome is unknown (the server had the whole pipeline, COMMIT included),
// and costs the store nothing but
// that connection: the next Applies go through, and what the cut commit
// did is all or nothing (the action's row and its key agree).
func TestRawPipelineCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	schema := schemaFor(t.Name())
	run := fmt.Sprintf("r%d", time.Now().UnixNano()) // the schema outlives the test (-count)
	s := open(t, postgres.Config{Schema: schema})
	conn, watch := rawConn(t), rawConn(t)
	ctx := context.Background()
	p := &plan.Plan{Goal: "cancel", Actions: []plan.Action{
		{ID: "a1", Tool: "t", Args: json.RawMessage(`{"i":1}`)},
		{ID: "a2", Tool: "t", Args: json.RawMessage(`{"i":2}`)},
	}}
	if _, _, err := s.CreateRun(ctx, ledger.Run{ID: run, Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	key := func(id string) string {
		k, err := plan.Key(run, id, "t", p.Actions[map[string]int{"a1": 0, "a2": 1}[id]].Args)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := postgres.RawSends()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %s.runs WHERE run_id = $1 FOR UPDATE`, pgx.Identifier{schema}.Sanitize()), run); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		res, err := s.Apply(cctx, ledger.Claim(run, "a1", "t", key("a1"), p.Actions[0].Args, 1))
		if err == nil {
			err = res[0].Err
		}
		done <- err
	}()
	waitForLock(ctx, t, watch, schema, "%runs%", "the claim waiting for the run", func() string {
		select {
		case err := <-done:
			return fmt.Sprintf("the claim returned (%v) while another transaction held its run", err)
		default:
			return ""
		}
	})
	cancel()
	select {
	case err := <-done:
		// The whole pipeline was written: the server may commit it once
		// the lock is free.
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "outcome is unknown") {
			t.Errorf("the cancelled claim returned %v, want context.Canceled and an outcome unknown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled claim did not return within 30 s")
	}
	if postgres.RawSends() == before {
		t.Error("no pipeline was written by the package: the test did not test it")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// The store goes on.
	res, err := s.Apply(ctx, ledger.Claim(run, "a2", "t", key("a2"), p.Actions[1].Args, 1))
	if err != nil || res[0].Err != nil {
		t.Fatalf("a claim after the cancelled one: %v %+v", err, res)
	}
	// The cut commit did all or nothing: the server had the whole pipeline
	// and may have gone on with it once the lock was free.
	deadline := time.Now().Add(30 * time.Second)
	for {
		acts, err := s.Actions(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.Key(ctx, key("a1"))
		found := err == nil
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			t.Fatal(err)
		}
		claimed := acts[0].Status == ledger.StatusClaimed
		if claimed == found && (!found || k.State == ledger.StatusClaimed) {
			if acts[1].Status != ledger.StatusClaimed {
				t.Errorf("a2 is %s, want claimed", acts[1].Status)
			}
			t.Logf("the cut claim of a1 %s", map[bool]string{true: "committed", false: "did not commit"}[claimed])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a1 is %s but its key is found=%v (%+v): the cut commit was half done", acts[0].Status, found, k)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
