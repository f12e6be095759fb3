package postgres_test

import (
	"fmt"
	"testing"

	"github.com/docketrun/docket/ledger/postgres"
)

// BenchmarkStepEncryption is BenchmarkStep with and without envelope
// encryption (Config.Keyring).
//
//	go test ./ledger/postgres -run '^$' -bench StepEncryption -benchtime 2000x
func BenchmarkStepEncryption(b *testing.B) {
	kr := postgres.NewTestKeyring(b, 1)
	for _, inflight := range []int{1, 64} {
		for _, encrypted := range []bool{false, true} {
			b.Run(fmt.Sprintf("inflight=%d/encrypted=%v", inflight, encrypted), func(b *testing.B) {
				cfg := postgres.Config{Schema: schemaFor(fmt.Sprintf("%s-%d", b.Name(), b.N)), MaxConns: max(8, inflight)}
				if encrypted {
					cfg.Keyring = kr
				}
				benchSteps(b, open(b, cfg), inflight)
			})
		}
	}
}
