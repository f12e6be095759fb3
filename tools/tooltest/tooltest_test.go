package tooltest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

func TestToolDefaults(t *testing.T) {
	t.Parallel()
	var tl tooltest.Tool
	s := tl.Spec()
	if s.Name != "fake" || s.Class != tools.ReadOnly || string(s.InputSchema) != `{"type":"object"}` {
		t.Errorf("Spec = %+v", s)
	}
	if _, err := tools.NewRegistry(&tl); err != nil {
		t.Fatalf("default fake refused by the registry: %v", err)
	}
	out, err := tl.Call(context.Background(), tools.Call{Key: "k1"})
	if err != nil || string(out) != `{"ok":true}` {
		t.Errorf("Call = %s, %v", out, err)
	}
	if _, found, err := tl.Lookup(context.Background(), tools.Call{Key: "k1"}); found || err != nil {
		t.Errorf("Lookup = %v, %v", found, err)
	}
	if len(tl.Calls()) != 1 || tl.Calls()[0].Key != "k1" || len(tl.Lookups()) != 1 {
		t.Errorf("recorded %v / %v", tl.Calls(), tl.Lookups())
	}
}

func TestToolFuncs(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tl := &tooltest.Tool{
		SpecValue: tools.Spec{Name: "x", Class: tools.Lookup},
		CallFunc:  func(context.Context, tools.Call) (json.RawMessage, error) { return nil, tools.Permanent(boom) },
		LookupFunc: func(context.Context, tools.Call) (json.RawMessage, bool, error) {
			return json.RawMessage(`1`), true, nil
		},
	}
	if _, err := tl.Call(context.Background(), tools.Call{}); !errors.Is(err, boom) {
		t.Errorf("Call err = %v", err)
	}
	if out, found, _ := tl.Lookup(context.Background(), tools.Call{}); !found || string(out) != "1" {
		t.Errorf("Lookup = %s, %v", out, found)
	}
}

func TestWorldCountsEffectsByClass(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	ctx := context.Background()
	for _, c := range []struct {
		class   tools.Class
		effects int
	}{{tools.ReadOnly, 0}, {tools.Idempotent, 1}, {tools.Keyed, 1}, {tools.Lookup, 3}, {tools.AtMostOnce, 3}} {
		tl := w.Tool(tools.Spec{Name: string(c.class), Class: c.class})
		key := "k-" + string(c.class)
		var first json.RawMessage
		for i := 0; i < 3; i++ {
			out, err := tl.Call(ctx, tools.Call{Key: key, Args: json.RawMessage(`{"n":1}`)})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = out
			} else if (c.class == tools.Keyed || c.class == tools.Idempotent) && string(out) != string(first) {
				t.Errorf("%s: repeat answered %s, first %s", c.class, out, first)
			}
		}
		if got := w.Effects(key); got != c.effects {
			t.Errorf("%s: %d effects, want %d", c.class, got, c.effects)
		}
		if got := w.Requests(key); got != 3 {
			t.Errorf("%s: %d requests, want 3", c.class, got)
		}
	}
	d := w.Duplicates()
	if len(d) != 2 || d["k-lookup"] != 3 || d["k-at_most_once"] != 3 {
		t.Errorf("Duplicates = %v", d)
	}
	if keys := w.Keys(); len(keys) != 4 {
		t.Errorf("Keys = %v", keys)
	}
}

func TestWorldFaultsAndLookup(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	w.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
		switch {
		case call.Key == "refused":
			return tooltest.FailNotSent
		case call.Key == "rejected":
			return tooltest.Reject
		case n == 1:
			return tooltest.LoseReply
		}
		return tooltest.NoFault
	}
	ctx := context.Background()
	tl := w.Tool(tools.Spec{Name: "create", Class: tools.Lookup})

	if _, err := tl.Call(ctx, tools.Call{Key: "refused"}); !isOutcome(err, tools.NotSentOutcome) || w.Effects("refused") != 0 {
		t.Errorf("FailNotSent: %v, %d effects", err, w.Effects("refused"))
	}
	if _, err := tl.Call(ctx, tools.Call{Key: "rejected"}); !isOutcome(err, tools.Definite) || w.Effects("rejected") != 0 {
		t.Errorf("Reject: %v", err)
	}
	_, err := tl.Call(ctx, tools.Call{Key: "k1"})
	if !errors.Is(err, tooltest.ErrLostReply) || !isOutcome(err, tools.Unknown) {
		t.Fatalf("LoseReply: %v", err)
	}
	// The effect happened although the reply was lost: the lookup finds it.
	out, found, err := tl.Lookup(ctx, tools.Call{Key: "k1"})
	stored, _ := w.Output("k1")
	if err != nil || !found || string(out) != string(stored) || w.Effects("k1") != 1 {
		t.Errorf("Lookup after lost reply = %s %v %v (effects %d)", out, found, err, w.Effects("k1"))
	}
	if _, found, _ := tl.Lookup(ctx, tools.Call{Key: "other"}); found {
		t.Error("Lookup found an effect that never happened")
	}
	if _, err := tl.Call(ctx, tools.Call{}); !isOutcome(err, tools.Definite) {
		t.Errorf("call without key: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tl.Call(cctx, tools.Call{Key: "k2"}); !isOutcome(err, tools.NotSentOutcome) || w.Requests("k2") != 0 {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestWorldConcurrentKeyed(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	tl := w.Tool(tools.Spec{Name: "pay", Class: tools.Keyed})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := tl.Call(context.Background(), tools.Call{Key: "same"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if w.Effects("same") != 1 || len(tl.Calls()) != 20 {
		t.Errorf("effects %d, calls %d", w.Effects("same"), len(tl.Calls()))
	}
}

func isOutcome(err error, want tools.Outcome) bool {
	if err == nil {
		return false
	}
	o, _ := tools.Classify(err)
	return o == want
}
