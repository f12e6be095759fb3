package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/docketrun/docket/planner"
)

// progressPrinter shows a planning as it happens on a terminal: the model's
// text as it streams, each tool call as the model finishes writing it, each
// queued action with what it runs after, read-only calls, rejected calls.
type progressPrinter struct {
	w      io.Writer
	inText bool // in the middle of the model's text
}

// withProgress returns ctx with a progress printer on w when show is set.
func withProgress(ctx context.Context, w io.Writer, show bool) (context.Context, *progressPrinter) {
	if !show {
		return ctx, nil
	}
	pp := &progressPrinter{w: w}
	return planner.WithProgress(ctx, pp.print), pp
}

func (pp *progressPrinter) print(pr planner.Progress) {
	switch pr.Kind {
	case planner.ProgressText:
		if !pp.inText {
			fmt.Fprint(pp.w, "model: ")
			pp.inText = true
		}
		fmt.Fprint(pp.w, pr.Text)
		return
	case planner.ProgressReasoning, planner.ProgressRound:
		return
	}
	pp.endText()
	switch pr.Kind {
	case planner.ProgressCall:
		fmt.Fprintf(pp.w, "  … %s %s\n", pr.Tool, clipLine(string(pr.Args), 160))
	case planner.ProgressRead:
		fmt.Fprintf(pp.w, "  read %s %s\n", pr.Tool, clipLine(string(pr.Args), 160))
	case planner.ProgressAction:
		a := pr.Action
		after := ""
		if len(a.DependsOn) > 0 {
			after = " (after " + strings.Join(a.DependsOn, ", ") + ")"
		}
		fmt.Fprintf(pp.w, "  queued %s %s%s\n", a.ID, a.Tool, after)
	case planner.ProgressRejected:
		fmt.Fprintf(pp.w, "  rejected %s: %s\n", pr.Tool, clipLine(pr.Msg, 200))
	case planner.ProgressWarning:
		fmt.Fprintf(pp.w, "  warning: %s\n", pr.Msg)
	}
}

// endText ends a line of streamed text.
func (pp *progressPrinter) endText() {
	if pp != nil && pp.inText {
		fmt.Fprintln(pp.w)
		pp.inText = false
	}
}

func clipLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// sayWarnings prints the server quirks a planning worked around.
func sayWarnings(w io.Writer, res *planner.Result) {
	for _, m := range res.Warnings {
		fmt.Fprintf(w, "docket: warning: %s\n", m)
	}
}
