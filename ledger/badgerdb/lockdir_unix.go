//go:build unix && !aix && !solaris

package badgerdb

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/docketrun/docket/ledger"
)

// lockDir takes the lock Badger takes on a data directory (an exclusive
// flock of the directory itself), for work on its files while no handle has
// it open. Like Open it waits up to lockWait for a lock held a moment
// longer by a child process forked before the holder closed it (see
// lockWait). Errors: ledger.ErrLocked.
func lockDir(dir string) (unlock func(), err error) {
	return retryLocked(func() (func(), error) {
		f, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("ledger: opening %s: %w", dir, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ledger.ErrLocked, dir)
		}
		return nil, fmt.Errorf("ledger: locking %s: %w", dir, err)
	}, func(err error) bool { return errors.Is(err, ledger.ErrLocked) })
}
