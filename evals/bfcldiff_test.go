package evals

import (
	"bufio"
	"encoding/json"
	"math/rand"
	"os"
	"sort"
	"testing"
)

// TestBFCLDifferentialDump writes, for every leaderboard case, its answer and
// many mutated plans with this scorer's verdicts, so that they can be
// compared with the leaderboard's own Python checker (which is not part of
// this repository). It runs only when DOCKET_BFCL_DIFF names the output file:
//
//	DOCKET_BFCL_DIFF=/tmp/plans.jsonl go test ./evals -run BFCLDifferential
//
// then feed the file and the leaderboard data to the upstream ast_checker.
func TestBFCLDifferentialDump(t *testing.T) {
	out := os.Getenv("DOCKET_BFCL_DIFF")
	if out == "" {
		t.Skip("set DOCKET_BFCL_DIFF=FILE to write plans and verdicts for a comparison with the upstream checker")
	}
	seed := int64(20261130)
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	sets := importDirB(t, "testdata/bfcl")
	cats := make([]string, 0, len(sets))
	for c := range sets {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	n := 0
	for _, cat := range cats {
		for _, c := range sets[cat].Cases {
			var plans [][]Call
			if c.Expect.NoAction {
				plans = append(plans, nil, []Call{{Tool: "x", Args: json.RawMessage(`{}`)}})
			} else {
				for pick := 0; pick < 3; pick++ {
					plans = append(plans, GroundTruthCalls(c, pick))
				}
				gt := GroundTruthCalls(c, 0)
				for k := 0; k < 12; k++ {
					plans = append(plans, mutatePlan(rng, c, gt))
				}
			}
			for _, p := range plans {
				r := Score(c, p)
				code := ""
				if len(r.Codes) > 0 {
					code = r.Codes[0]
				}
				if p == nil {
					p = []Call{}
				}
				line, _ := json.Marshal(map[string]any{"id": c.ID, "category": cat, "calls": p, "go_pass": r.Pass, "go_code": code})
				w.Write(append(line, '\n'))
				n++
			}
		}
	}
	t.Logf("wrote %d plans to %s", n, out)
}

// mutatePlan changes a plan in one of the ways models get answers wrong, or
// in ways the leaderboard tolerates.
func mutatePlan(rng *rand.Rand, c *Case, gt []Call) []Call {
	calls := append([]Call(nil), gt...)
	i := rng.Intn(len(calls))
	args, _ := parseValue(calls[i].Args)
	set := func(v value) { calls[i].Args = json.RawMessage(v.String()) }
	switch op := rng.Intn(10); {
	case op == 0 && len(calls) > 1: // reorder
		rng.Shuffle(len(calls), func(a, b int) { calls[a], calls[b] = calls[b], calls[a] })
	case op == 1 && len(args.keys) > 0: // drop an argument
		set(withoutKey(args, args.keys[rng.Intn(len(args.keys))]))
	case op == 2: // an extra argument, known to the tool or not
		set(withKey(args, "extra_zz", value{k: kInt, i: 1}))
	case op == 3: // another call of the plan's tool
		calls = append(calls, calls[i])
	default: // change one value's form or content
		if len(args.keys) == 0 {
			return calls
		}
		k := args.keys[rng.Intn(len(args.keys))]
		v, _ := args.get(k)
		set(withKey(args, k, variant(rng, v)))
	}
	return calls
}

// variant returns v in another form: the same number written as the other
// type, a string with other case and punctuation, a reordered list, an
// object missing a key, or a different value.
func variant(rng *rand.Rand, v value) value {
	switch v.k {
	case kInt:
		switch rng.Intn(4) {
		case 0:
			return value{k: kFloat, f: float64(v.i), s: ""}
		case 1:
			return value{k: kString, s: v.String()}
		case 2:
			return value{k: kBool, b: v.i != 0}
		}
		return value{k: kInt, i: v.i + 1}
	case kFloat:
		switch rng.Intn(3) {
		case 0:
			if v.f == float64(int64(v.f)) {
				return value{k: kInt, i: int64(v.f)}
			}
		case 1:
			return value{k: kFloat, f: v.f * 1.5}
		}
		return value{k: kString, s: v.String()}
	case kString:
		switch rng.Intn(4) {
		case 0:
			return value{k: kString, s: flipCase(v.s) + ", "}
		case 1:
			return value{k: kString, s: "'" + v.s + "'"}
		case 2:
			return value{k: kList, list: []value{v}}
		}
		return value{k: kString, s: v.s + "x"}
	case kBool:
		if rng.Intn(2) == 0 {
			return value{k: kInt, i: 1}
		}
		return value{k: kBool, b: !v.b}
	case kList:
		out := value{k: kList, list: append([]value(nil), v.list...)}
		switch {
		case len(out.list) > 1 && rng.Intn(2) == 0:
			out.list[0], out.list[1] = out.list[1], out.list[0]
		case len(out.list) > 0 && rng.Intn(2) == 0:
			out.list[0] = variant(rng, out.list[0])
		default:
			out.list = out.list[:len(out.list)/2]
		}
		return out
	case kObject:
		if len(v.keys) > 0 && rng.Intn(2) == 0 {
			k := v.keys[rng.Intn(len(v.keys))]
			x, _ := v.get(k)
			return withKey(v, k, variant(rng, x))
		}
		if len(v.keys) > 0 {
			return withoutKey(v, v.keys[0])
		}
		return withKey(v, "zz", value{k: kInt, i: 1})
	}
	return value{k: kString, s: "null"}
}

func flipCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 32
		case c >= 'A' && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}
