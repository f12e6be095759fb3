package executor

import (
	"sync"

	"github.com/docketrun/docket/ledger"
)

// In-process coordination. Badger's directory lock means one process owns a
// ledger, so a claim owned by this ledger handle's incarnation is in flight in
// this process. The registries below are state of the ledger.Store handle
// (ledger.Store.Local), shared by every Engine on that handle, so two engines
// (or two drives of one engine) wait for each other instead of polling, and
// two handles never share anything.

// coordKey is the key of the executor's registries in ledger.Local.
type coordKey struct{}

// coord holds the in-process registries of one store handle.
type coord struct {
	keysMu sync.Mutex
	keys   map[string]chan struct{} // key -> closed when its holder lets go

	gatesMu sync.Mutex
	gates   map[string]*gate // run id -> gate

	slotsMu sync.Mutex
	slots   map[string]chan struct{} // tool -> closed when this process frees one of its slots (limits.go)
}

// coordOf returns the registries attached to l.
func coordOf(l ledger.Store) *coord {
	return l.Local().Value(coordKey{}, func() any {
		return &coord{keys: map[string]chan struct{}{}, gates: map[string]*gate{}}
	}).(*coord)
}

// takeKey reserves key for the caller, who must call the returned release
// after the key's outcome is recorded (or once it gives up the key). If another
// goroutine of this process holds it, ok is false and wait is closed when it
// lets go.
func takeKey(l ledger.Store, key string) (release func(), wait <-chan struct{}, ok bool) {
	c := coordOf(l)
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	if ch, busy := c.keys[key]; busy {
		return nil, ch, false
	}
	ch := make(chan struct{})
	c.keys[key] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			c.keysMu.Lock()
			delete(c.keys, key)
			c.keysMu.Unlock()
			close(ch)
		})
	}, nil, true
}

// gate serializes a run's status changes (pause, cancel, resume, final status)
// with new claims: claims hold claimMu for reading, status changes for
// writing. So once Pause or Cancel returns, no drive of this process claims a
// new action of the run.
type gate struct {
	c      *coord
	refs   int // holders: drives, and status changes or reviews in progress (c.gatesMu)
	drives int // drives of this process that hold the gate (c.gatesMu)
	// undriven is closed when drives drops to 0 (c.gatesMu); nil while no
	// drive holds the gate.
	undriven chan struct{}
	claimMu  sync.RWMutex
	// guarded by claimMu (read under R, written under W)
	status         ledger.RunStatus
	pausedByPerson bool // Pause was called while a drive was active
}

func acquireGate(l ledger.Store, runID string) *gate {
	c := coordOf(l)
	c.gatesMu.Lock()
	defer c.gatesMu.Unlock()
	g := c.gates[runID]
	if g == nil {
		g = &gate{c: c}
		c.gates[runID] = g
	}
	g.refs++
	return g
}

func releaseGate(l ledger.Store, runID string, g *gate) {
	c := g.c
	c.gatesMu.Lock()
	defer c.gatesMu.Unlock()
	g.refs--
	if g.refs == 0 {
		delete(c.gates, runID)
	}
}

// halted reports whether the run may not start new actions. Call with claimMu held.
func (g *gate) halted() bool {
	switch g.status {
	case ledger.RunCancelled, ledger.RunCompleted:
		return true
	case ledger.RunPaused:
		return g.pausedByPerson
	}
	return false
}

// otherDrives reports whether another drive of this process holds the run's
// gate (the caller holds one reference itself).
func otherDrives(l ledger.Store, runID string) bool {
	c := coordOf(l)
	c.gatesMu.Lock()
	defer c.gatesMu.Unlock()
	g := c.gates[runID]
	return g != nil && g.refs > 1
}

// acquireDrive is acquireGate for a drive: while it holds the gate, driving
// reports true. A drive counts itself before it first takes claimMu and reads
// the run's rows after that, so a review change made under claimMu's write
// lock while driving was false is seen by every drive that starts later.
func acquireDrive(l ledger.Store, runID string) *gate {
	g := acquireGate(l, runID)
	g.c.gatesMu.Lock()
	if g.drives == 0 {
		g.undriven = make(chan struct{})
	}
	g.drives++
	g.c.gatesMu.Unlock()
	return g
}

func releaseDrive(l ledger.Store, runID string, g *gate) {
	g.c.gatesMu.Lock()
	g.drives--
	if g.drives == 0 {
		close(g.undriven)
		g.undriven = nil
	}
	g.c.gatesMu.Unlock()
	releaseGate(l, runID, g)
}

// whenUndriven returns a channel that is closed once no drive of this
// process drives the run of g (already closed when none does).
func (g *gate) whenUndriven() <-chan struct{} {
	g.c.gatesMu.Lock()
	defer g.c.gatesMu.Unlock()
	if g.undriven == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return g.undriven
}

// driving reports whether a drive of this process is driving the run of g.
// A drive keeps the rows it loaded in memory (and claims from them), so a
// change to a row it may still start (an edit, a new revision) would be
// overwritten or ignored: callers refuse such changes while it is true.
func (g *gate) driving() bool {
	g.c.gatesMu.Lock()
	defer g.c.gatesMu.Unlock()
	return g.drives > 0
}
