package postgres_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// Lease reads another incarnation's lease by the database's clock: live
// with the time it has left while its heartbeat runs, expired once it
// stopped, ended at once by Close, and ErrNotFound for an incarnation that
// never registered.
func TestNodeLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))

	l, err := b.Lease(ctx, a.Incarnation())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if !l.Live() || l.Left() <= 0 || l.Left() > 1500*time.Millisecond || l.Incarnation != a.Incarnation() ||
		l.PID != os.Getpid() || l.Host != host || l.Stopped {
		t.Fatalf("a live node's lease: %+v (left %v)", l, l.Left())
	}

	old := a.Incarnation()
	a.PauseHeartbeat(true)
	waitExpired(t, b, old)
	if l, err = b.Lease(ctx, old); err != nil || l.Live() || l.Left() != 0 || l.Expires.After(l.Now) {
		t.Fatalf("an expired lease: %+v, %v", l, err)
	}

	c := open(t, shortLease(schema))
	inc := c.Incarnation()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = b.Lease(ctx, inc); err != nil || l.Live() || !l.Stopped {
		t.Fatalf("the lease of a closed store: %+v, %v", l, err)
	}

	if _, err := b.Lease(ctx, "inc_never"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an unknown incarnation: %v, want ErrNotFound", err)
	}
	b.Close()
	if _, err := b.Lease(ctx, old); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("Lease on a closed store: %v, want ErrClosed", err)
	}
}
