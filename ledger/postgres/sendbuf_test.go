package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/docketrun/docket/ledger/postgres"
)

// A connection's pipelines go into its own buffer: an Apply allocates at
// least a kilobyte less than when pgx's frontend grows a new buffer for
// each pipeline (it drops the last one after any send over 1 KiB). If a
// pgx upgrade stops taking the buffer, this fails: the trick is then dead
// weight, to be removed.
func TestPipelinesReuseTheConnectionsBuffer(t *testing.T) {
	// Not parallel: it counts the process's allocations, and turns the
	// buffers off for a while.
	ctx := context.Background()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name() + t.TempDir())})
	const per, rounds = 40, 4
	ids := make([]string, per*rounds)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
	}
	claim := groupRuns(t, s, ids...)
	defer postgres.SendBuf(true)
	perApply := map[bool]float64{}
	for r := range rounds {
		on := r%2 == 1
		postgres.SendBuf(on)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, id := range ids[r*per : (r+1)*per] {
			op, _ := claim(id, "a")
			if res, err := s.Apply(ctx, op); err != nil || res[0].Err != nil {
				t.Fatalf("claim in %s: %v %+v", id, err, res)
			}
		}
		runtime.ReadMemStats(&after)
		perApply[on] += float64(after.TotalAlloc-before.TotalAlloc) / per / (rounds / 2)
	}
	t.Logf("bytes allocated per Apply: %.0f with the connection's buffer, %.0f without", perApply[true], perApply[false])
	if perApply[true] > perApply[false]-1024 {
		t.Fatalf("an Apply allocates %.0f bytes with the connection's buffer and %.0f without: want at least 1 KiB less", perApply[true], perApply[false])
	}
}
