package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
)

// Durable timers in the commands: `docket run` that is still up sleeps until
// its run's wake time and drives it again; `docket serve` wakes every run
// whose wake time comes (wakeLoop); the other commands report a waiting run
// with exit 7 and say when it wakes (waitingTimerMessage).

// waitingFor reports whether doc is a run that waits only for a time:
// running, with a wake time recorded.
func waitingFor(doc ledger.RunDoc) bool {
	return doc.Run.Status == ledger.RunRunning && !doc.Run.WakeAt.IsZero()
}

// waitingTimerMessage says until when a run waits and how it goes on.
func waitingTimerMessage(doc ledger.RunDoc, flags string) string {
	var ids []string
	for _, a := range doc.Actions {
		if a.Timer != nil && a.Key == "" && (a.Status == ledger.StatusPending || a.Status == ledger.StatusApproved) {
			ids = append(ids, a.ID)
		}
	}
	msg := fmt.Sprintf("run %s waits until %s", doc.Run.ID, doc.Run.WakeAt.UTC().Format(time.RFC3339))
	if len(ids) > 0 {
		msg += fmt.Sprintf(" (%s %s)", plural(len(ids), "action", "actions"), strings.Join(ids, ", "))
	}
	msg += fmt.Sprintf(": docket serve wakes it then, or run docket resume%s %s then; docket run-now%s %s ACTION runs a waiting action at once",
		flags, doc.Run.ID, flags, doc.Run.ID)
	return msg
}

// untilDone is `docket run` staying up for its run's timers: while the run
// waits only for a time, it sleeps until the wake time (by the ledger's
// clock) and drives the run again. It returns when the run stops waiting,
// on err, or when ctx ends (Ctrl-C: the run stays waiting, recorded; the
// service or the same command again wakes it).
func untilDone(ctx context.Context, stderr io.Writer, l ledger.Store, eng *executor.Engine, doc ledger.RunDoc, err error) (ledger.RunDoc, error) {
	for err == nil && waitingFor(doc) {
		d := doc.Run.WakeAt.Sub(l.Now())
		fmt.Fprintf(stderr, "docket run: run %s waits until %s (in %s); this command drives it then (stop it with Ctrl-C: the run stays recorded, and docket serve or this same command wakes it)\n",
			doc.Run.ID, doc.Run.WakeAt.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond))
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return doc, ctx.Err()
			case <-t.C:
			}
		}
		doc, err = eng.Resume(ctx, doc.Run.ID, nil)
	}
	return doc, err
}

// wakeCheck bounds how long the service's wake loop sleeps: a wake time
// recorded by another writer (another node, a command) is seen within it.
const wakeCheck = time.Second

// wakeRetry is how long the wake loop leaves a run it woke whose wake time
// did not move (its drive failed, or still runs) before it wakes it again.
const wakeRetry = 30 * time.Second

// wakeLoop drives the runs whose wake time comes, until ctx ends: one
// timer, on the earliest wake time the ledger's index holds (read again at
// least every wakeCheck). A store without a wake index (ledger.WakeIndex)
// has no timers to wake. On a shared ledger (ledger.Reserver) a node
// reserves a run's wake before it drives it, so one node takes each wake
// (the claims would keep a second drive from repeating an effect anyway).
func wakeLoop(ctx context.Context, led ledger.Store, drive func(runID string), log *slog.Logger) {
	wi, ok := led.(ledger.WakeIndex)
	if !ok {
		return
	}
	res, shared := led.(ledger.Reserver)
	type woke struct {
		at, when time.Time
		release  func()
	}
	woken := map[string]woke{}
	defer func() {
		for _, w := range woken {
			if w.release != nil {
				w.release()
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now := led.Now()
		ws, err := wi.Wakes(ctx, now, 1000)
		if err != nil && ctx.Err() == nil {
			log.Warn("looking for runs to wake failed; trying again", "err", err)
		}
		due := make(map[string]bool, len(ws))
		for _, w := range ws {
			due[w.RunID] = true
			if prev, ok := woken[w.RunID]; ok && prev.at.Equal(w.At) && now.Sub(prev.when) < wakeRetry {
				continue // woken for this time already: its drive moves or clears it
			}
			var release func()
			if shared {
				name := "docket.wake/" + w.RunID + "/" + w.At.UTC().Format(time.RFC3339Nano)
				rel, ok, err := res.Reserve(ctx, name)
				if err != nil || !ok {
					continue // another node wakes it (or the ledger is away: next time)
				}
				release = rel
			}
			if prev, ok := woken[w.RunID]; ok && prev.release != nil {
				prev.release()
			}
			woken[w.RunID] = woke{at: w.At, when: now, release: release}
			log.Info("waking a run: its time came", "run_id", w.RunID, "waiting_until", w.At.UTC().Format(time.RFC3339Nano))
			drive(w.RunID)
		}
		for id, w := range woken {
			if !due[id] { // its drive moved or cleared the wake time
				if w.release != nil {
					w.release()
				}
				delete(woken, id)
			}
		}
		sleep := wakeCheck
		if next, ok, err := ledger.NextWake(ctx, led); err == nil && ok {
			if d := next.At.Sub(led.Now()); d < sleep && !due[next.RunID] {
				sleep = max(d, 0)
			}
		}
		timer.Reset(sleep)
	}
}
