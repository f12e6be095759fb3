package evals

import (
	"path/filepath"
	"testing"
)

const starterDataset = "testdata/starter/dataset.jsonl"

func TestStarterDataset(t *testing.T) {
	t.Parallel()
	d, err := LoadDataset(starterDataset, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Cases) < 60 {
		t.Errorf("%d cases, want at least 60", len(d.Cases))
	}
	cats := map[string]int{}
	for _, c := range d.Cases {
		cats[c.Category]++
		if c.Expect.NoAction != (len(c.Reference) == 0) {
			t.Errorf("%s: a reference plan is needed exactly when some action is expected", c.ID)
		}
		r := Score(c, c.Reference)
		if !r.Pass {
			t.Errorf("%s: its reference plan fails its expectation: %v", c.ID, r.Reasons)
		}
		if !r.Metrics.ExactMatch || !r.Metrics.Safe || !r.Metrics.ValidPlan {
			t.Errorf("%s: reference metrics %+v", c.ID, r.Metrics)
		}
	}
	for _, want := range []string{"crm", "payments", "email", "calendar", "files", "tickets", "multi_step", "irrelevance", "unsafe"} {
		if cats[want] < 5 {
			t.Errorf("category %s has %d cases, want at least 5", want, cats[want])
		}
	}
	if _, err := LoadToolsFile(filepath.Join("testdata", "starter", "tools.json")); err != nil {
		t.Fatal(err)
	}
}
