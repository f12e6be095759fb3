package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

func init() {
	register("audit", "print a run's history as JSON Lines (audit RUN) and verify its hash chain (--verify)",
		func(env Env) command { return &auditCmd{env: env} })
}

// auditCmd is `docket audit RUN [--verify]`.
type auditCmd struct{ env Env }

const auditUsage = "audit [--data DIR | --ledger URL | --server URL --token T] [--verify] RUN"

// Run prints every event of the run, one JSON object per line, each with
// its hash: who created it and with which plan, which rule decided each
// action, who approved, every claim and attempt with its failure class,
// the outputs. With --verify it checks the hash chain (and the run
// record's last hash, so that events cut from the end are seen too): exit 0
// when it holds, 1 when it is broken or the run has none.
func (c *auditCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("audit", auditUsage, c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	verify := fs.Bool("verify", false, "verify the run's hash chain: exit 1 when it is broken")
	sf := addServerFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("audit needs exactly one run id")
	}
	runID := pos[0]
	var evs []ledger.Event
	var head string
	if sf.remote() {
		if evs, head, err = c.remote(ctx, sf, runID); err != nil {
			return err
		}
	} else {
		l, err := openRecorded(ctx, *data, key, c.env.Stderr)
		if err != nil {
			return err
		}
		defer l.Close()
		run, err := l.GetRun(ctx, runID)
		if err != nil {
			return notFound(fmt.Errorf("reading run %s: %w", runID, err), runID)
		}
		head = run.AuditHash
		if evs, err = l.Events(ctx, runID, 0, 0); err != nil {
			return fmt.Errorf("reading the events of run %s: %w", runID, err)
		}
	}
	// Each event with its data as stored, so that a line's hash can be
	// checked against it (but for data with line breaks, which a line
	// cannot hold: ui.AppendEventLine).
	var line []byte
	var printErr error
	for _, ev := range evs {
		if line, printErr = ui.AppendEventLine(line[:0], ev); printErr != nil {
			// Data that is not JSON was not written by docket: --verify
			// says where the chain breaks.
			printErr = fmt.Errorf("printing the history of run %s: %w", runID, printErr)
			break
		}
		if _, err := c.env.Stdout.Write(line); err != nil {
			return err
		}
	}
	if !*verify {
		return printErr
	}
	chained, err := ledger.VerifyChain(runID, evs, head)
	var ce *ledger.ChainError
	switch {
	case errors.As(err, &ce):
		return withCode(exitFailed, fmt.Errorf("run %s: the audit chain is broken at event %d: %s; the ledger was changed outside docket", runID, ce.Seq, ce.Reason))
	case err != nil:
		return err
	case !chained:
		return withCode(exitFailed, fmt.Errorf("run %s has no audit chain (recorded before docket chained events): its history cannot be verified", runID))
	case printErr != nil:
		return printErr
	}
	fmt.Fprintf(c.env.Stderr, "docket audit: run %s: %d events, hash chain verified (head %s)\n", runID, len(evs), head)
	return nil
}

// remote reads the events through the service (pages of GET
// /v1/runs/{id}/events) and the chain's head (GET /v1/runs/{id}/audit's
// Docket-Audit-Head); the chain is verified here, not taken from the
// service's word, but for events the service cannot send.
func (c *auditCmd) remote(ctx context.Context, sf *serverFlags, runID string) ([]ledger.Event, string, error) {
	cl, err := sf.client(c.env)
	if err != nil {
		return nil, "", err
	}
	base := "/v1/runs/" + url.PathEscape(runID)
	h, err := cl.doHeader(ctx, "GET", base+"/audit", nil, nil, nil)
	if err != nil {
		return nil, "", err
	}
	var evs []ledger.Event
	var after uint64
	for {
		var page struct {
			Events []ledger.Event `json:"events"`
			Last   uint64         `json:"last"`
		}
		if err := cl.do(ctx, "GET", base+"/events?limit=10000&after="+strconv.FormatUint(after, 10), nil, nil, &page); err != nil {
			// An event whose data is not JSON cannot be sent as it is
			// stored; the service's own verification says where its
			// chain breaks (a verdict of broken needs no trust).
			if at, perr := strconv.ParseUint(h.Get("Docket-Audit-Broken-At"), 10, 64); perr == nil && h.Get("Docket-Audit") == "broken" {
				return nil, "", withCode(exitFailed, fmt.Errorf("run %s: the audit chain is broken at event %d, the service reports (its events could not be read: %w); the ledger was changed outside docket", runID, at, err))
			}
			return nil, "", err
		}
		if len(page.Events) == 0 {
			// Events recorded after the head was read are not part of this
			// audit: it ends at the head.
			head := h.Get("Docket-Audit-Head")
			for i, ev := range evs {
				if head != "" && ev.Hash == head {
					return evs[:i+1], head, nil
				}
			}
			return evs, head, nil
		}
		evs = append(evs, page.Events...)
		after = page.Last
	}
}
