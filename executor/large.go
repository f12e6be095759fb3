package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/docketrun/docket/tools"
)

// outputTooLarge handles a call that was answered with success but with more
// output than its tool may return (tools.ErrOutputTooLarge, a definite
// failure: asking again gives the same answer). The call took effect and only
// its answer is lost, so it is never called again. A keyed, lookup or
// at_most_once action goes to needs_review — its effect exists, so failing
// it (and compensating the run) would be as wrong as repeating it — and
// handled is true. read_only and idempotent actions are left to the plain
// definite failure (handled false).
func (d *driver) outputTooLarge(ctx context.Context, a *act, err error, msg string) (handled bool) {
	if !errors.Is(err, tools.ErrOutputTooLarge) {
		return false
	}
	switch a.n.spec.Class {
	case tools.ReadOnly, tools.Idempotent:
		return false
	}
	d.park(ctx, a, fmt.Sprintf("%s; not called again (%s: the effect exists): resolve it with --done OUTPUT_JSON or --skip", msg, a.n.spec.Class))
	return true
}
