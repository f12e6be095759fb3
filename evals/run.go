package evals

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// PlanFunc plans one try of one case: the calls the model planned and the
// tokens it used. An error means no plan (the case fails with it as the
// reason); ctx carries the case (WithCase) for a Recorder or Replayer.
type PlanFunc func(ctx context.Context, c *Case, try int) (PlanLine, error)

// RunOptions configure Run. Only Plan is required.
type RunOptions struct {
	// Plan plans one case. Required.
	Plan PlanFunc
	// Concurrency bounds the cases planned at once. Default 4.
	Concurrency int
	// Repeat plans every case this many times (pass^k). Default 1.
	Repeat int
	// Retries is how often a try whose error Retryable accepts is tried
	// again. Default 2. The planner already retries each HTTP request; this
	// covers whole plannings that failed for a passing reason.
	Retries int
	// Retryable says whether an error may go away by trying again. Default:
	// never.
	Retryable func(error) bool
	// Backoff is the wait before retry n (1-based). Default n × 1s.
	Backoff func(n int) time.Duration
	// Progress receives progress; nil: none. Terminal: redraw one line with a
	// bar and the ETA; otherwise plain lines, at most one per 5% done.
	Progress io.Writer
	Terminal bool
	// Plans, when set, receives every try's plan line as it completes.
	Plans io.Writer
	// Done is called after every try (e.g. to save its recording).
	Done func(c *Case, try int, pl PlanLine) error
	// Now is the clock for ETAs. Default time.Now.
	Now func() time.Time
	// Executor runs execution-level cases (those with a world).
	Executor Executor
}

// Run plans every case of d Repeat times with bounded concurrency and scores
// each try. It stops early only when ctx ends or Done fails.
func Run(ctx context.Context, d *Dataset, o RunOptions) (*Report, error) {
	if o.Plan == nil {
		return nil, errors.New("evals: Run needs RunOptions.Plan")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Repeat <= 0 {
		o.Repeat = 1
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 2
	}
	if o.Backoff == nil {
		o.Backoff = func(n int) time.Duration { return time.Duration(n) * time.Second }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	type job struct {
		c   *Case
		idx int
		try int
	}
	total := len(d.Cases) * o.Repeat
	lines := make([][]PlanLine, len(d.Cases))
	for i := range lines {
		lines[i] = make([]PlanLine, o.Repeat)
	}
	jobs := make(chan job)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prog := newProgress(o.Progress, o.Terminal, total, o.Now)
	var mu sync.Mutex // guards Plans, Done, firstErr, prog
	var firstErr error
	var wg sync.WaitGroup
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				pl := runTry(ctx, j.c, j.try, o)
				lines[j.idx][j.try-1] = pl
				mu.Lock()
				if firstErr == nil {
					if o.Plans != nil {
						if err := WritePlanLine(o.Plans, pl); err != nil {
							firstErr = fmt.Errorf("writing plans: %w", err)
						}
					}
					if o.Done != nil && firstErr == nil {
						if err := o.Done(j.c, j.try, pl); err != nil {
							firstErr = err
						}
					}
					if firstErr != nil {
						cancel()
					}
				}
				prog.step(pl.Error == "")
				mu.Unlock()
			}
		}()
	}
feed:
	for try := 1; try <= o.Repeat; try++ {
		for i, c := range d.Cases {
			select {
			case jobs <- job{c, i, try}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	prog.finish()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep := &Report{Dataset: d.Path}
	for i, c := range d.Cases {
		rep.Cases = append(rep.Cases, scoreTries(c, lines[i], (&ScoreOptions{Executor: o.Executor, Context: ctx}).check()))
	}
	rep.Finish()
	return rep, nil
}

func runTry(ctx context.Context, c *Case, try int, o RunOptions) PlanLine {
	tctx := WithCase(ctx, c.ID, try)
	var pl PlanLine
	var err error
	for attempt := 0; ; attempt++ {
		pl, err = o.Plan(tctx, c, try)
		if err == nil || attempt >= o.Retries || o.Retryable == nil || !o.Retryable(err) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(o.Backoff(attempt + 1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	pl.ID, pl.Try = c.ID, try
	if err != nil {
		pl.Calls = nil
		pl.Error = oneLine(err.Error())
	}
	return pl
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}

// progress reports how far a run got.
type progress struct {
	w        io.Writer
	terminal bool
	total    int
	done     int
	failed   int
	start    time.Time
	now      func() time.Time
	lastPct  int
}

func newProgress(w io.Writer, terminal bool, total int, now func() time.Time) *progress {
	return &progress{w: w, terminal: terminal, total: total, start: now(), now: now, lastPct: -1}
}

func (p *progress) step(ok bool) {
	p.done++
	if !ok {
		p.failed++
	}
	if p.w == nil {
		return
	}
	elapsed := p.now().Sub(p.start)
	eta := "?"
	if p.done > 0 && p.done < p.total {
		left := time.Duration(float64(elapsed) / float64(p.done) * float64(p.total-p.done))
		eta = left.Round(time.Second).String()
	} else if p.done == p.total {
		eta = "0s"
	}
	pctDone := 100 * p.done / p.total
	errs := ""
	if p.failed > 0 {
		errs = fmt.Sprintf(", %d planner %s", p.failed, plural(p.failed, "error", "errors"))
	}
	if p.terminal {
		const width = 30
		filled := width * p.done / p.total
		bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
		fmt.Fprintf(p.w, "\r\033[K[%s] %d/%d %3d%% ETA %s%s", bar, p.done, p.total, pctDone, eta, errs)
		return
	}
	if pctDone/5 != p.lastPct/5 || p.done == p.total {
		p.lastPct = pctDone
		fmt.Fprintf(p.w, "eval: %d/%d planned (%d%%), elapsed %s, eta %s%s\n", p.done, p.total, pctDone, elapsed.Round(time.Second), eta, errs)
	}
}

func (p *progress) finish() {
	if p.w != nil && p.terminal {
		fmt.Fprintln(p.w)
	}
}
