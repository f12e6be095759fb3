// Package tooltest provides hand-written fakes of tools for tests of other
// packages: Tool, a tools.Tool (and tools.Looker) whose behaviour comes from
// XxxFunc fields, and World, an in-process external system that counts the
// effects performed per action key so a test can assert "exactly one effect".
//
// Imports: the standard library and tools. Never used by production code.
package tooltest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/docketrun/docket/tools"
)

var (
	_ tools.Tool   = (*Tool)(nil)
	_ tools.Looker = (*Tool)(nil)
)

// Tool is a fake tools.Tool. The zero value is usable: a read_only tool named
// "fake" with an open object schema that answers {"ok":true}. Tool records
// every call and lookup. Safe for concurrent use; do not copy after first use.
type Tool struct {
	// SpecValue is returned by Spec, with Name "fake", Class read_only and
	// InputSchema {"type":"object"} filled in when empty.
	SpecValue tools.Spec
	// CallFunc implements Call. Default: returns {"ok":true}.
	CallFunc func(ctx context.Context, call tools.Call) (json.RawMessage, error)
	// LookupFunc implements Lookup. Default: not found.
	LookupFunc func(ctx context.Context, call tools.Call) (json.RawMessage, bool, error)

	mu      sync.Mutex
	calls   []tools.Call
	lookups []tools.Call
}

// Spec returns SpecValue with defaults filled in.
func (t *Tool) Spec() tools.Spec {
	s := t.SpecValue
	if s.Name == "" {
		s.Name = "fake"
	}
	if s.Class == "" {
		s.Class = tools.ReadOnly
	}
	if len(s.InputSchema) == 0 {
		s.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	return s
}

// Call records the call and runs CallFunc.
func (t *Tool) Call(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	t.mu.Lock()
	t.calls = append(t.calls, call)
	t.mu.Unlock()
	if t.CallFunc != nil {
		return t.CallFunc(ctx, call)
	}
	return json.RawMessage(`{"ok":true}`), nil
}

// Lookup records the lookup and runs LookupFunc.
func (t *Tool) Lookup(ctx context.Context, call tools.Call) (json.RawMessage, bool, error) {
	t.mu.Lock()
	t.lookups = append(t.lookups, call)
	t.mu.Unlock()
	if t.LookupFunc != nil {
		return t.LookupFunc(ctx, call)
	}
	return nil, false, nil
}

// Calls returns the calls made so far, in order.
func (t *Tool) Calls() []tools.Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]tools.Call(nil), t.calls...)
}

// Lookups returns the lookups made so far, in order.
func (t *Tool) Lookups() []tools.Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]tools.Call(nil), t.lookups...)
}
