package evals

import (
	"path/filepath"
	"testing"
)

// BenchmarkScoreBFCL scores every case of the committed leaderboard subset
// (3,475 cases) against its own answer, one op per full pass.
func BenchmarkScoreBFCL(b *testing.B) {
	sets := importDirB(b, filepath.Join("testdata", "bfcl"))
	var cases []*Case
	var plans [][]Call
	for _, d := range sets {
		for _, c := range d.Cases {
			cases = append(cases, c)
			if c.Expect.NoAction {
				plans = append(plans, nil)
			} else {
				plans = append(plans, GroundTruthCalls(c, 0))
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i, c := range cases {
			Score(c, plans[i])
		}
	}
	b.ReportMetric(float64(len(cases)), "cases/op")
}
