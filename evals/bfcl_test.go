package evals

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// bfclDirs are the leaderboard subsets the tests score: the committed,
// compressed copy in testdata/bfcl (CI clones only this repository).
func bfclDirs(t *testing.T) []string {
	return []string{filepath.Join("testdata", "bfcl")}
}

// TestBFCLCopyMatchesShared checks that the committed copy is byte for byte
// the shared subset (when the shared directory is there), so that scoring
// the copy is scoring the original.
func TestBFCLCopyMatchesShared(t *testing.T) {
	shared := filepath.Join("..", "..", "shared", "datasets", "bfcl")
	if _, err := os.Stat(shared); err != nil {
		t.Skipf("shared leaderboard data not found at %s (normal in CI, which clones only this repository): the committed copy in testdata/bfcl is scored instead", shared)
	}
	files, _ := filepath.Glob(filepath.Join(shared, "BFCL_v*.json"))
	more, _ := filepath.Glob(filepath.Join(shared, "possible_answer", "BFCL_v*.json"))
	files = append(files, more...)
	if len(files) != 18 {
		t.Fatalf("found %d leaderboard files in %s, expected 18", len(files), shared)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(shared, f)
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := openMaybeGzip(filepath.Join("testdata", "bfcl", rel+".gz"))
		if err != nil {
			t.Fatalf("%s has no committed copy: %v", rel, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("testdata/bfcl/%s.gz differs from %s", rel, f)
		}
	}
}

// importDir imports every question file of dir into one dataset per file.
func importDir(t *testing.T, dir string) map[string]*Dataset {
	t.Helper()
	return importDirB(t, dir)
}

var imported struct {
	sync.Mutex
	sets map[string]map[string]*Dataset
}

// importDirB imports dir once per test binary (the datasets are read-only
// afterwards, so tests share them).
func importDirB(t testing.TB, dir string) map[string]*Dataset {
	imported.Lock()
	defer imported.Unlock()
	if sets, ok := imported.sets[dir]; ok {
		return sets
	}
	sets := importDirFresh(t, dir)
	if imported.sets == nil {
		imported.sets = map[string]map[string]*Dataset{}
	}
	imported.sets[dir] = sets
	return sets
}

func importDirFresh(t testing.TB, dir string) map[string]*Dataset {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "BFCL_v*_*.json*"))
	if len(files) == 0 {
		t.Fatalf("no leaderboard files in %s", dir)
	}
	out := map[string]*Dataset{}
	for _, qf := range files {
		cat := BFCLCategory(qf)
		in := BFCLImport{QuestionsName: qf}
		q, err := openMaybeGzip(qf)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		in.Questions = q
		af := filepath.Join(dir, "possible_answer", filepath.Base(qf))
		if _, err := os.Stat(af); err == nil {
			a, err := openMaybeGzip(af)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			in.Answers, in.AnswersName = a, af
		}
		var buf bytes.Buffer
		n, err := ImportBFCL(in, &buf)
		if err != nil {
			t.Fatalf("import %s: %v", qf, err)
		}
		tmp, err := os.MkdirTemp("", "bfcl-import-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		path := filepath.Join(tmp, cat+".jsonl")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := LoadDataset(path, nil)
		if err != nil {
			t.Fatalf("load imported %s: %v", qf, err)
		}
		if len(d.Cases) != n {
			t.Fatalf("%s: imported %d cases, loaded %d", qf, n, len(d.Cases))
		}
		out[cat] = d
	}
	return out
}

// TestBFCLGroundTruthPasses feeds every case's own answer as the plan (each
// alternative acceptable value in turn) and expects every case to pass.
func TestBFCLGroundTruthPasses(t *testing.T) {
	t.Parallel()
	for _, dir := range bfclDirs(t) {
		total, impossible := 0, 0
		for cat, d := range importDir(t, dir) {
			for pick := 0; pick < 2; pick++ {
				for k, c := range d.Cases {
					if raceEnabled && (pick > 0 || k%4 != 0) {
						continue // sampled under the race detector
					}
					var calls []Call
					if !c.Expect.NoAction {
						calls = GroundTruthCalls(c, pick)
					}
					r := Score(c, calls)
					if bad := unanswerable(c); bad != "" {
						// upstream's own answer lists no acceptable value:
						// the leaderboard fails every plan, so must we
						if r.Pass {
							t.Errorf("%s: passed although %s", c.ID, bad)
						}
						if pick == 0 {
							t.Logf("%s: cannot pass (as upstream): %s; reasons: %v", c.ID, bad, r.Reasons)
							total++
							impossible++
						}
						continue
					}
					if !r.Pass {
						t.Errorf("%s %s (alternative %d): ground truth fails: %v\ncalls: %s", dir, c.ID, pick, r.Reasons, showCalls(calls))
					}
					if pick == 0 {
						total++
					}
				}
			}
			_ = cat
		}
		t.Logf("%s: %d cases; all pass with their own answers except %d whose answers contradict their functions (they fail upstream too)", dir, total, impossible)
		if total < 3000 && !raceEnabled {
			t.Errorf("%s: only %d cases imported, expected the full subset (3,475)", dir, total)
		}
	}
}

// unanswerable says why no plan can pass a case under the leaderboard's
// rules because its own data contradicts itself ("" when it does not): an
// answer that lists no acceptable value, names a parameter the function does
// not define, or gives no value for a required parameter. It reads the data
// structurally, not through the checker, so the checker is not its own judge.
func unanswerable(c *Case) string {
	for _, w := range c.Expect.Actions {
		spec, _ := c.toolSpec(w.Tool)
		s, _ := parseValue(spec.InputSchema)
		props, _ := s.get("properties")
		for _, a := range w.Args {
			if a.Matcher.oneOf != nil && len(a.Matcher.oneOf) == 0 && a.Matcher.equals == nil && !a.Matcher.Optional {
				return "the answer for " + w.Tool + " lists no acceptable value for " + a.Name
			}
			if _, ok := props.get(a.Name); !ok && !a.Matcher.Optional {
				return "the answer for " + w.Tool + " gives " + a.Name + ", which the function does not define"
			}
		}
		req, _ := s.get("required")
		for _, r := range req.list {
			m, ok := w.Args.get(r.s)
			if !ok || (m.equals == nil && len(m.oneOf) == 0) {
				return "the answer for " + w.Tool + " gives no value for required parameter " + r.s
			}
		}
	}
	return ""
}

func showCalls(cs []Call) string {
	b, _ := json.Marshal(cs)
	return string(b)
}

// mutate returns a copy of calls with fn applied to call i's arguments.
func mutateArgs(calls []Call, i int, fn func(v value) value) []Call {
	out := append([]Call(nil), calls...)
	v, _ := parseValue(out[i].Args)
	v = fn(v)
	out[i].Args = json.RawMessage(v.String())
	return out
}

func withoutKey(v value, key string) value {
	out := value{k: kObject}
	for i, k := range v.keys {
		if k != key {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, v.vals[i])
		}
	}
	return out
}

func withKey(v value, key string, x value) value {
	out := withoutKey(v, key)
	out.keys = append(out.keys, key)
	out.vals = append(out.vals, x)
	return out
}

// changed returns a value of the same kind that differs from v.
func changed(v value) value {
	switch v.k {
	case kString:
		return value{k: kString, s: v.s + "zq9"}
	case kInt:
		return value{k: kInt, i: v.i + 7919}
	case kFloat:
		return value{k: kFloat, f: v.f + 7919.5, s: ""}
	case kBool:
		return value{k: kBool, b: !v.b}
	case kList:
		return value{k: kList, list: append(append([]value{}, v.list...), value{k: kString, s: "zq9"})}
	case kObject:
		return withKey(v, "zq9", value{k: kInt, i: 1})
	}
	return value{k: kString, s: "zq9"}
}

func wantCode(t *testing.T, r Result, id, what string, codes ...string) {
	t.Helper()
	if r.Pass {
		t.Errorf("%s: %s passed, want a failure", id, what)
		return
	}
	for _, got := range r.Codes {
		for _, c := range codes {
			if strings.HasSuffix(got, c) {
				if len(r.Reasons) == 0 || r.Reasons[0] == "" {
					t.Errorf("%s: %s failed without a reason", id, what)
				}
				return
			}
		}
	}
	t.Errorf("%s: %s failed with %v (%v), want one of %v", id, what, r.Codes, r.Reasons, codes)
}

// TestBFCLMutationsFail breaks every case's answer in each way the
// leaderboard refuses and checks the verdict and the reason.
func TestBFCLMutationsFail(t *testing.T) {
	t.Parallel()
	sets := importDir(t, filepath.Join("testdata", "bfcl"))
	counts := map[string]int{}
	for _, d := range sets {
		for k, c := range d.Cases {
			if raceEnabled && k%4 != 0 {
				continue // sampled under the race detector
			}
			if c.Expect.NoAction {
				name := "some_tool"
				if len(c.Tools) > 0 {
					name = c.Tools[0].Name
				}
				r := Score(c, []Call{{Tool: name, Args: json.RawMessage(`{}`)}})
				wantCode(t, r, c.ID, "a call on an irrelevance case", "decoder_success")
				counts["irrelevance call"]++
				continue
			}
			if unanswerable(c) != "" {
				continue
			}
			gt := GroundTruthCalls(c, 0)
			parallel := c.Rules == RulesBFCLParallel
			// wrong call count
			r := Score(c, append(append([]Call{}, gt...), gt[0]))
			wantCode(t, r, c.ID, "one call too many", "wrong_count")
			r = Score(c, nil)
			wantCode(t, r, c.ID, "no call", "wrong_count")
			counts["wrong count"]++
			// wrong function
			wrong := append([]Call{}, gt...)
			wrong[0].Tool = "not_the_function"
			r = Score(c, wrong)
			if parallel {
				wantCode(t, r, c.ID, "a wrong function", "cannot_find_match")
			} else {
				wantCode(t, r, c.ID, "a wrong function", "wrong_func_name")
			}
			counts["wrong function"]++
			// extra parameter
			r = Score(c, mutateArgs(gt, 0, func(v value) value { return withKey(v, "zq_extra", value{k: kInt, i: 1}) }))
			if parallel {
				wantCode(t, r, c.ID, "an extra parameter", "cannot_find_match")
			} else {
				wantCode(t, r, c.ID, "an extra parameter", "unexpected_param")
			}
			counts["extra parameter"]++
			// missing required parameter
			fn := bfclFuncOf(gt[0].Tool, specOf(t, c, gt[0].Tool))
			args0, _ := parseValue(gt[0].Args)
			for _, req := range fn.required {
				if _, ok := args0.get(req); !ok {
					continue
				}
				r = Score(c, mutateArgs(gt, 0, func(v value) value { return withoutKey(v, req) }))
				if parallel {
					wantCode(t, r, c.ID, "a missing required parameter", "cannot_find_match")
				} else {
					wantCode(t, r, c.ID, "a missing required parameter "+req, "missing_required")
				}
				counts["missing required"]++
				break
			}
			// changed value: the first argument whose changed value is not also acceptable
			want := c.Expect.Actions[0]
			for _, k := range args0.keys {
				m, _ := want.Args.get(k)
				v, _ := args0.get(k)
				nv := changed(v)
				if pyIn(nv, m.acceptable()) || (nv.k == kString && stringCheck(k, nv, m.acceptable()).ok) {
					continue
				}
				r = Score(c, mutateArgs(gt, 0, func(v value) value { return withKey(v, k, nv) }))
				if parallel {
					wantCode(t, r, c.ID, "a changed value of "+k, "cannot_find_match")
				} else {
					wantCode(t, r, c.ID, "a changed value of "+k, "value_error:string", "value_error:others", "value_error:list/tuple", "value_error:dict_key", "value_error:dict_value", "type_error:nested", "dict_checker:unclear", "list_dict_count", "type_error:simple")
				}
				counts["changed value"]++
				break
			}
		}
	}
	t.Logf("mutations checked: %v", counts)
	for _, k := range []string{"wrong count", "wrong function", "extra parameter", "missing required", "changed value", "irrelevance call"} {
		if counts[k] < 100 && !raceEnabled {
			t.Errorf("only %d %q mutations were checked", counts[k], k)
		}
	}
}

func specOf(t *testing.T, c *Case, tool string) json.RawMessage {
	s, ok := c.toolSpec(tool)
	if !ok {
		t.Fatalf("%s: no tool %s", c.ID, tool)
	}
	return s.InputSchema
}
