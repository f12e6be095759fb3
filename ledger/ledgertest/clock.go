package ledgertest

import (
	"sync"
	"time"
)

// Clock is a clock a test sets: every reading is the same until it is set
// or moved again. Give its Now to a store's config (or a server's) to hold
// the ledger's time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the time the clock was set to.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
