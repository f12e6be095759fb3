package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/docketrun/docket/ledger"
)

// On the shared ledger a claim belongs to its process's node lease: when a
// `docket run` is killed while an action is claimed, the claim stays "in
// flight" until that lease expires (up to the lease's length, 10s by
// default), and nothing may take it over before. The same command run again
// at once waits for that lease, says so, and then takes the run over; a
// lease that is renewed meanwhile belongs to a process that is alive and
// performing the action: that is "busy" (exit 4), never a failure.

// defaultLeaseWait is --lease-wait's default: longer than the default lease
// (postgres.DefaultLease), so a restart right after a crash always waits it
// out.
const defaultLeaseWait = time.Minute

// leaseWaitFlag adds --lease-wait to a command that drives runs; a
// negative duration is refused when the flags are parsed, before the
// command does anything.
func leaseWaitFlag(fs *flag.FlagSet) *time.Duration {
	d := defaultLeaseWait
	fs.Var((*leaseWaitValue)(&d), "lease-wait", "with --ledger: how long to wait for the lease of a process that was stopped while performing an action of this run, before taking the run over (0: do not wait; exit 4 at once)")
	return &d
}

// leaseWaitValue is a time.Duration flag that is not negative.
type leaseWaitValue time.Duration

func (v *leaseWaitValue) String() string { return time.Duration(*v).String() }

func (v *leaseWaitValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	*v = leaseWaitValue(d)
	return nil
}

// leaseWaitMargin is added to a lease's remaining time before looking
// again (a round trip to the database).
const leaseWaitMargin = 100 * time.Millisecond

// maxTakeovers bounds how often one command waits again for a claim it met
// while driving (another process claimed an action after the first look).
const maxTakeovers = 3

// heldClaim is an action of the run claimed by another incarnation whose
// lease still holds.
type heldClaim struct {
	action string
	lease  ledger.NodeLease
}

// liveClaims lists the actions of runID that another process claimed and
// whose lease still holds (none for a run that does not exist yet).
func liveClaims(ctx context.Context, pg sharedStore, runID string) ([]heldClaim, error) {
	rows, err := pg.Actions(ctx, runID)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	leases := map[string]ledger.NodeLease{}
	var held []heldClaim
	for _, r := range rows {
		if r.Status != ledger.StatusClaimed || r.Key == "" {
			continue
		}
		rec, err := pg.Key(ctx, r.Key)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if rec.State != ledger.StatusClaimed || rec.Owner == "" || rec.Owner == pg.Incarnation() {
			continue
		}
		l, ok := leases[rec.Owner]
		if !ok {
			l, err = pg.Lease(ctx, rec.Owner)
			if errors.Is(err, ledger.ErrNotFound) {
				continue // no node row: its claims count as gone
			}
			if err != nil {
				return nil, err
			}
			leases[rec.Owner] = l
		}
		if l.Live() {
			held = append(held, heldClaim{action: r.ID, lease: l})
		}
	}
	return held, nil
}

// waitLeases waits, up to bound, until no action of runID is claimed by
// another process whose lease holds, printing on w what it waits for and
// until when. It returns exit 4 when the wait would exceed bound, or when a
// lease it waited for was renewed (its process is alive and performing the
// action).
func waitLeases(ctx context.Context, pg sharedStore, runID string, bound time.Duration, w io.Writer) error {
	deadline := time.Now().Add(bound)
	waited := map[string]time.Time{} // incarnation → the expiry this command waited for
	for {
		held, err := liveClaims(ctx, pg, runID)
		if err != nil {
			return fmt.Errorf("run %s: reading its claims: %w", runID, err)
		}
		if len(held) == 0 {
			return nil
		}
		longest := held[0]
		for _, h := range held {
			if prev, ok := waited[h.lease.Incarnation]; ok && h.lease.Expires.After(prev) {
				return withCode(exitBusy, fmt.Errorf("run %s: action %s is being performed by another process that is alive (%s): its lease was renewed while this command waited; "+
					"let it finish (watch it with docket runs show), then run this command again", runID, h.action, describeLease(h.lease)))
			}
			if h.lease.Left() > longest.lease.Left() {
				longest = h
			}
		}
		left := longest.lease.Left()
		if time.Now().Add(left).After(deadline) {
			return withCode(exitBusy, fmt.Errorf("run %s: action %s is claimed by another process (%s) whose lease holds for another %v, longer than --lease-wait (%v) allows: "+
				"run the same command again once it expired (at %s); nothing was started",
				runID, longest.action, describeLease(longest.lease), left.Round(time.Millisecond), bound, longest.lease.Expires.UTC().Format(time.RFC3339)))
		}
		fmt.Fprintf(w, "docket: waiting up to %v for the lease of a previous process (%s) on action %s to expire (at %s by the database's clock); then this command takes the run over\n",
			left.Round(100*time.Millisecond), describeLease(longest.lease), longest.action, longest.lease.Expires.UTC().Format(time.RFC3339Nano))
		for _, h := range held {
			waited[h.lease.Incarnation] = h.lease.Expires
		}
		t := time.NewTimer(left + leaseWaitMargin)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("run %s: interrupted while waiting for the lease of %s: %w", runID, longest.lease.Incarnation, ctx.Err())
		}
	}
}

// describeLease names a lease's process for a person.
func describeLease(l ledger.NodeLease) string {
	return fmt.Sprintf("incarnation %s, host %s, pid %d", l.Incarnation, l.Host, l.PID)
}

// sharedStore is a ledger whose claims are held by node leases that other
// processes can read (ledger.LeaseReader).
type sharedStore struct {
	ledger.Store
	ledger.LeaseReader
}

// claimedElsewhere reports whether err is a claim (or an outcome) refused
// because another live process holds the action's claim.
func claimedElsewhere(err error, self string) bool {
	var ce *ledger.ConflictError
	return errors.As(err, &ce) && ce.Current.State == ledger.StatusClaimed && ce.Current.Owner != "" && ce.Current.Owner != self
}

// driveShared runs drive, a drive of runID. On the shared ledger it first
// waits (up to bound in all) for the leases of other processes' claims on
// the run, and when the drive meets such a claim anyway (taken after the
// first look) it waits for it and drives again. Other ledgers: drive as is.
func driveShared(ctx context.Context, l ledger.Store, runID string, bound time.Duration, w io.Writer, drive func() (ledger.RunDoc, error)) (ledger.RunDoc, error) {
	lr, ok := l.(ledger.LeaseReader)
	if !ok || runID == "" {
		return drive()
	}
	start := time.Now()
	for i := 0; ; i++ {
		if err := waitLeases(ctx, sharedStore{l, lr}, runID, max(bound-time.Since(start), 0), w); err != nil {
			return ledger.RunDoc{}, err
		}
		doc, err := drive()
		if i >= maxTakeovers || !claimedElsewhere(err, l.Incarnation()) {
			return doc, err
		}
	}
}
