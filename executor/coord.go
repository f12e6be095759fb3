package executor

import (
	"sync"

	"github.com/docketrun/docket/ledger"
)

// In-process coordination. Badger's directory lock means one process owns a
// ledger, so a claim owned by this ledger handle's incarnation is in flight in
// this process. These registries are shared by every Engine on the same
// ledger.Store, so two engines (or two drives of one engine) wait for each
// other instead of polling.

type inflightKey struct {
	l   ledger.Store
	key string
}

var inflight = struct {
	mu sync.Mutex
	m  map[inflightKey]chan struct{}
}{m: map[inflightKey]chan struct{}{}}

// takeKey reserves key for the caller, who must call the returned release
// after the key's outcome is recorded (or once it gives up the key). If another
// goroutine of this process holds it, ok is false and wait is closed when it
// lets go.
func takeKey(l ledger.Store, key string) (release func(), wait <-chan struct{}, ok bool) {
	k := inflightKey{l, key}
	inflight.mu.Lock()
	defer inflight.mu.Unlock()
	if ch, busy := inflight.m[k]; busy {
		return nil, ch, false
	}
	ch := make(chan struct{})
	inflight.m[k] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			inflight.mu.Lock()
			delete(inflight.m, k)
			inflight.mu.Unlock()
			close(ch)
		})
	}, nil, true
}

// keyWaiter returns the channel of the in-process holder of key, if any.
func keyWaiter(l ledger.Store, key string) (<-chan struct{}, bool) {
	inflight.mu.Lock()
	defer inflight.mu.Unlock()
	ch, ok := inflight.m[inflightKey{l, key}]
	return ch, ok
}

// gate serializes a run's status changes (pause, cancel, resume, final status)
// with new claims: claims hold claimMu for reading, status changes for
// writing. So once Pause or Cancel returns, no drive of this process claims a
// new action of the run.
type gate struct {
	refs   int // holders: drives, and status changes or reviews in progress (gates.mu)
	drives int // drives of this process that hold the gate (gates.mu)
	// undriven is closed when drives drops to 0 (gates.mu); nil while no
	// drive holds the gate.
	undriven chan struct{}
	claimMu  sync.RWMutex
	// guarded by claimMu (read under R, written under W)
	status         ledger.RunStatus
	pausedByPerson bool // Pause was called while a drive was active
}

type gateKey struct {
	l     ledger.Store
	runID string
}

var gates = struct {
	mu sync.Mutex
	m  map[gateKey]*gate
}{m: map[gateKey]*gate{}}

func acquireGate(l ledger.Store, runID string) *gate {
	gates.mu.Lock()
	defer gates.mu.Unlock()
	k := gateKey{l, runID}
	g := gates.m[k]
	if g == nil {
		g = &gate{}
		gates.m[k] = g
	}
	g.refs++
	return g
}

func releaseGate(l ledger.Store, runID string, g *gate) {
	gates.mu.Lock()
	defer gates.mu.Unlock()
	g.refs--
	if g.refs == 0 {
		delete(gates.m, gateKey{l, runID})
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
	gates.mu.Lock()
	defer gates.mu.Unlock()
	g := gates.m[gateKey{l, runID}]
	return g != nil && g.refs > 1
}

// acquireDrive is acquireGate for a drive: while it holds the gate, driving
// reports true. A drive counts itself before it first takes claimMu and reads
// the run's rows after that, so a review change made under claimMu's write
// lock while driving was false is seen by every drive that starts later.
func acquireDrive(l ledger.Store, runID string) *gate {
	g := acquireGate(l, runID)
	gates.mu.Lock()
	if g.drives == 0 {
		g.undriven = make(chan struct{})
	}
	g.drives++
	gates.mu.Unlock()
	return g
}

func releaseDrive(l ledger.Store, runID string, g *gate) {
	gates.mu.Lock()
	g.drives--
	if g.drives == 0 {
		close(g.undriven)
		g.undriven = nil
	}
	gates.mu.Unlock()
	releaseGate(l, runID, g)
}

// whenUndriven returns a channel that is closed once no drive of this
// process drives the run of g (already closed when none does).
func (g *gate) whenUndriven() <-chan struct{} {
	gates.mu.Lock()
	defer gates.mu.Unlock()
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
	gates.mu.Lock()
	defer gates.mu.Unlock()
	return g.drives > 0
}
