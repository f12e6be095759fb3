package memory_test

import (
	"errors"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/memory"
)

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, c ledgertest.Config) ledger.Store {
		s, err := memory.New(memory.Config{Clock: c.Clock, SubscriberBuffer: c.SubscriberBuffer, MaxOutputBytes: c.MaxOutputBytes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil && !errors.Is(err, ledger.ErrClosed) {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}, ledgertest.Options{})
}
