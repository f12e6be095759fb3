package badgerdb

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/docketrun/docket/ledger"
)

// A directory lock held for a moment by another open file of the lock (as
// a forked child holds a copy of a just-closed handle's descriptor until it
// execs) is waited for: Open retries and succeeds once it is let go. Held
// throughout, Open says ErrLocked.
func TestOpenWaitsForALockLetGo(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	hold := func() *os.File {
		f, err := os.Open(dir) // Badger locks the directory itself
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		return f
	}

	f := hold()
	retries := 0
	var once sync.Once
	lockRetried = func() {
		retries++
		once.Do(func() { f.Close() }) // let go while Open waits
	}
	defer func() { lockRetried = nil }()
	l, err = Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open after the lock was let go: %v", err)
	}
	if retries == 0 {
		t.Fatal("Open did not wait: the lock was free at the first try")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// The lock Rekey and the other offline tools take (lockDir) waits the
	// same way.
	f = hold()
	retries = 0
	once = sync.Once{}
	lockRetried = func() {
		retries++
		once.Do(func() { f.Close() })
	}
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatalf("lockDir after the lock was let go: %v", err)
	}
	if retries == 0 {
		t.Fatal("lockDir did not wait: the lock was free at the first try")
	}
	unlock()

	f = hold()
	defer f.Close()
	lockRetried = nil
	if _, err := Open(ctx, Config{Dir: dir}); !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("Open while the lock is held: %v, want ErrLocked", err)
	}
	if _, err := lockDir(dir); !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("lockDir while the lock is held: %v, want ErrLocked", err)
	}
}
