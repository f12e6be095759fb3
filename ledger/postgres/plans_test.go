package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger/postgres"
)

// The adopt sweep, the inbox's and the runs page's lists and a run's
// actions (the run's document) are found through indexes with 100,000 finished runs in the
// ledger: their cost does not grow with the finished runs. The sweep
// still adopts exactly the orphans among them.
var removed = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)

func TestPlansAt100kRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 100,000 runs")
	}
	t.Parallel()
	ctx := context.Background()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	start := time.Now()
	if err := s.LoadRuns(ctx, 100_000); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded 100,000 runs in %v", time.Since(start).Round(time.Millisecond))
	plans, err := s.Plans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"adopt", "inbox", "list", "doc"} {
		p := plans[name]
		t.Logf("%s:\n%s", name, p)
		for _, table := range []string{"runs", "actions", "keys", "events"} {
			if strings.Contains(p, "Seq Scan on "+table) {
				t.Errorf("%s scans every row of %s", name, table)
			}
		}
		for _, m := range removed.FindAllStringSubmatch(p, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 1000 {
				t.Errorf("%s reads %d rows it does not need (an index that does not fit)", name, n)
			}
		}
	}
	// Orphans: the cancelled runs with a claim of a node that is gone
	// (every 10,000th) and the running runs whose driver is gone.
	var want []string
	for i := 1; i <= 100_000; i++ {
		if i%10000 == 0 || i%25000 == 1 {
			want = append(want, fmt.Sprintf("f%d", i))
		}
	}
	got, err := s.AdoptOrphans(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("adopted %v, want %v", got, want)
	}
}
