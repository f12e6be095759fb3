package tooltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/docketrun/docket/tools"
)

// Fault is what the World does to one request.
type Fault int

const (
	// NoFault: the request is served normally.
	NoFault Fault = iota
	// FailNotSent: nothing happens; the call returns a tools.NotSent error.
	FailNotSent
	// LoseReply: the effect happens but the reply is lost; the call returns an
	// unclassified error (outcome unknown), like a connection reset after sending.
	LoseReply
	// Reject: nothing happens; the call returns a tools.Permanent error.
	Reject
)

// World is an in-process external system shared by the tools it makes. It
// counts, per action key (the logical request), how many requests reached it
// and how many effects they performed, so a test can assert that every action
// took effect exactly once whatever faults and retries happened.
//
// How a request becomes an effect depends on the tool's class, as a real
// provider would behave:
//   - read_only: never an effect.
//   - idempotent: the first request for a key is the effect; repeats change nothing.
//   - keyed: the provider deduplicates by key: repeats return the first output.
//   - lookup, at_most_once: every request is a new effect (duplicates show up);
//     Lookup finds the effect made under the call's key.
//
// Safe for concurrent use.
type World struct {
	// FaultFunc, when set, decides what happens to each request; n is the
	// number of requests this key received so far, this one included.
	FaultFunc func(tool string, call tools.Call, n int) Fault

	mu       sync.Mutex
	seq      int
	requests map[string]int
	effects  map[string]int
	outputs  map[string]json.RawMessage
}

// NewWorld returns an empty world.
func NewWorld() *World {
	return &World{requests: map[string]int{}, effects: map[string]int{}, outputs: map[string]json.RawMessage{}}
}

// Tool returns a tool acting on the world (a tools.Looker too; its Lookup
// finds effects by key). spec gets the same defaults as Tool.Spec.
func (w *World) Tool(spec tools.Spec) *Tool {
	wt := &Tool{SpecValue: spec}
	s := wt.Spec()
	wt.CallFunc = func(ctx context.Context, call tools.Call) (json.RawMessage, error) {
		return w.serve(ctx, s, call)
	}
	wt.LookupFunc = func(ctx context.Context, call tools.Call) (json.RawMessage, bool, error) {
		if err := ctx.Err(); err != nil {
			return nil, false, tools.NotSent(err)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		out, ok := w.outputs[call.Key]
		return out, ok, nil
	}
	return wt
}

// ErrLostReply is the error a LoseReply fault returns (outcome unknown).
var ErrLostReply = errors.New("tooltest: connection reset after the request was sent")

func (w *World) serve(ctx context.Context, s tools.Spec, call tools.Call) (json.RawMessage, error) {
	if call.Key == "" {
		return nil, tools.Permanent(fmt.Errorf("tooltest: tool %q called without a key", s.Name))
	}
	if err := ctx.Err(); err != nil {
		return nil, tools.NotSent(err)
	}
	w.mu.Lock()
	w.requests[call.Key]++
	n := w.requests[call.Key]
	w.mu.Unlock()
	fault := NoFault
	if w.FaultFunc != nil {
		fault = w.FaultFunc(s.Name, call, n)
	}
	switch fault {
	case FailNotSent:
		return nil, tools.NotSent(fmt.Errorf("tooltest: %s: connection refused", s.Name))
	case Reject:
		return nil, tools.Permanent(fmt.Errorf("tooltest: %s: rejected", s.Name))
	}
	w.mu.Lock()
	out := w.apply(s, call)
	w.mu.Unlock()
	if fault == LoseReply {
		return nil, fmt.Errorf("%s: %w", s.Name, ErrLostReply)
	}
	return out, nil
}

// apply performs the effect of one request; w.mu is held.
func (w *World) apply(s tools.Spec, call tools.Call) json.RawMessage {
	if prev, ok := w.outputs[call.Key]; ok && (s.Class == tools.Keyed || s.Class == tools.Idempotent) {
		return prev
	}
	w.seq++
	out, _ := json.Marshal(map[string]any{
		"id":   fmt.Sprintf("%s-%d", s.Name, w.seq),
		"key":  call.Key,
		"args": call.Args,
	})
	if s.Class == tools.ReadOnly {
		return out
	}
	w.effects[call.Key]++
	if _, ok := w.outputs[call.Key]; !ok {
		w.outputs[call.Key] = out
	}
	return out
}

// Effects returns how many effects were performed under key.
func (w *World) Effects(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.effects[key]
}

// Requests returns how many requests for key reached the world (including
// those that failed by a fault).
func (w *World) Requests(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests[key]
}

// Output returns the output of the first effect performed under key.
func (w *World) Output(key string) (json.RawMessage, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out, ok := w.outputs[key]
	return out, ok
}

// Keys returns every key with at least one effect, sorted.
func (w *World) Keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.effects))
	for k := range w.effects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Duplicates returns the keys that took effect more than once, with their counts.
// An exactly-once run leaves it empty.
func (w *World) Duplicates() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := map[string]int{}
	for k, n := range w.effects {
		if n > 1 {
			d[k] = n
		}
	}
	return d
}
