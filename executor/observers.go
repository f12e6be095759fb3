package executor

import "github.com/docketrun/docket/ledger"

// Observers returns an Observer that tells every one of obs, in order, what
// the engine does (nil entries are left out): a service feeds its metrics,
// its live views and a tracer from one engine.
func Observers(obs ...Observer) Observer {
	var f fanout
	for _, o := range obs {
		switch o := o.(type) {
		case nil:
		case fanout:
			f = append(f, o...)
		default:
			f = append(f, o)
		}
	}
	if len(f) == 1 {
		return f[0]
	}
	return f
}

type fanout []Observer

func (f fanout) PlanRecorded(runID string, rev, n int) {
	for _, o := range f {
		o.PlanRecorded(runID, rev, n)
	}
}

func (f fanout) AttemptStarted(a AttemptInfo) {
	for _, o := range f {
		o.AttemptStarted(a)
	}
}

func (f fanout) AttemptEnded(a AttemptInfo, r AttemptResult) {
	for _, o := range f {
		o.AttemptEnded(a, r)
	}
}

func (f fanout) LookupDone(a AttemptInfo, found bool) {
	for _, o := range f {
		o.LookupDone(a, found)
	}
}

func (f fanout) Adopted(a AttemptInfo) {
	for _, o := range f {
		o.Adopted(a)
	}
}

func (f fanout) NeedsReview(a AttemptInfo, reason string) {
	for _, o := range f {
		o.NeedsReview(a, reason)
	}
}

func (f fanout) RunStatus(runID string, st ledger.RunStatus) {
	for _, o := range f {
		o.RunStatus(runID, st)
	}
}

// Approved tells the observers that implement ApprovalObserver.
func (f fanout) Approved(runID, actionID string) {
	for _, o := range f {
		if ao, ok := o.(ApprovalObserver); ok {
			ao.Approved(runID, actionID)
		}
	}
}
