package executor

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// TestResolvedDataIsNeverParsedAgain: an output whose text contains "${"
// passed on by a reference is data. Regression: once the resolved argument
// was written back (shown to a reviewer, or claimed), every approve, reject
// and rerun failed with "load: ... bad reference".
func TestResolvedDataIsNeverParsedAgain(t *testing.T) {
	t.Parallel()
	text := json.RawMessage(`{"text":"Price: ${price} and ${a.output.text}"}`)
	for _, pol := range []Policy{PolicyNone, PolicyAll} {
		t.Run(string(pol), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			src := &tooltest.Tool{SpecValue: spec("src", tools.ReadOnly), CallFunc: func(context.Context, tools.Call) (json.RawMessage, error) {
				return text, nil
			}}
			mail := w.Tool(spec("mail", tools.AtMostOnce))
			// The note's first call commits but its answer is lost: the retry
			// (and a restart) must work from the recorded, resolved args.
			w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault {
				if tool == "note" && n == 1 {
					return tooltest.LoseReply
				}
				return tooltest.NoFault
			}
			b := setup(t, []tools.Tool{src, mail, w.Tool(spec("note", tools.Keyed))})
			p := mkPlan(t, pa("a", "src", `{}`), pa("m", "mail", `{"body":"${a.output.text}"}`, "a"),
				pa("n", "note", `{"body":"${a.output.text}"}`, "a"))
			doc := b.run("r1", p, pol)
			ctx := context.Background()
			for i := 0; doc.Run.Status == ledger.RunAwaitingApproval && i < 3; i++ {
				if err := b.eng.Approve(ctx, "r1", nil, "ann"); err != nil {
					t.Fatalf("Approve: %v", err)
				}
				doc = b.resume("r1")
			}
			wantStatus(t, doc, ledger.RunCompleted)
			for _, id := range []string{"m", "n"} {
				a := wantAction(t, doc, id, ledger.StatusSucceeded)
				if got := string(a.Args); got != `{"body":"Price: ${price} and ${a.output.text}"}` {
					t.Fatalf("%s sent with %s", id, got)
				}
			}
			if len(mail.Calls()) != 1 {
				t.Fatalf("mail calls %d", len(mail.Calls()))
			}
			if n := w.Effects(row(t, doc, "n").Key); n != 1 {
				t.Fatalf("note took effect %d times", n)
			}
			// A new process reads the rows without parsing the data.
			b.restart()
			wantStatus(t, b.resume("r1"), ledger.RunCompleted)
		})
	}
}
