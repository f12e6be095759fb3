package ui

import (
	"context"

	"github.com/docketrun/docket/ledger"
)

// traceIDs is the ledger as the server reads it when tracing is on: every
// Run JSON it builds carries the run's trace id (Config.TraceID).
type traceIDs struct {
	ledger.Store
	id func(runID string) string
}

// withTraceIDs wraps led when id is set.
func withTraceIDs(led ledger.Store, id func(string) string) ledger.Store {
	if id == nil || led == nil {
		return led
	}
	return traceIDs{led, id}
}

func (t traceIDs) Doc(ctx context.Context, runID string) (ledger.RunDoc, error) {
	doc, err := t.Store.Doc(ctx, runID)
	if err == nil {
		doc.TraceID = t.id(doc.Run.ID)
	}
	return doc, err
}
