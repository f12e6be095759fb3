package badgerdb_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/masterkey"
)

// BenchmarkEncryption: durable actions (outcome + next claim, one commit
// each), one caller, with and without encryption at rest, with 200-byte
// and 8 KiB outputs (the latter go to the value log). Reports actions/s.
//
//	go test ./ledger/badgerdb -run '^$' -bench Encryption -benchtime 2000x
func BenchmarkEncryption(b *testing.B) {
	for _, size := range []int{200, 8 << 10} {
		for _, encrypted := range []bool{false, true} {
			b.Run(fmt.Sprintf("out=%d/encrypted=%v", size, encrypted), func(b *testing.B) {
				var key masterkey.Key
				if encrypted {
					var err error
					if key, err = masterkey.Generate(); err != nil {
						b.Fatal(err)
					}
				}
				l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: filepath.Join(b.TempDir(), "db"), Key: key})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				var runs []*actionRun
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if len(runs) == 0 || runs[len(runs)-1].i > benchRunActions {
						b.StopTimer()
						runs = append(runs, newActionRun(b, l, fmt.Sprintf("r%d", len(runs)), output(size)))
						b.StartTimer()
					}
					for !runs[len(runs)-1].step(b) {
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actions/s")
			})
		}
	}
}
