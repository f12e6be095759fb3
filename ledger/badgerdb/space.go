package badgerdb

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/docketrun/docket/ledger"
)

// Why a free-space guard, and not something else.
//
// Badger writes its memtable's write-ahead log, its value log, new tables
// (memtable flushes, compactions) and its discard statistics through shared
// file mappings of files it creates sparse (ftruncate). On a full file system
// a store into a hole of such a mapping is not an error but a SIGBUS, which
// the Go runtime turns into a fatal "unexpected fault address": no error,
// no deferred function, exit 2 with a goroutine dump (issue 13: a full disk
// looked like "bad input"). The alternatives were weighed:
//
//   - debug.SetPanicOnFault covers the goroutine that sets it, but Badger's
//     stores happen in its own goroutines (doWrites, flushMemtable, the
//     compactors, value-log GC), which we cannot reach; and a store that
//     faulted halfway would leave Badger's in-memory state (skiplist, write
//     offsets) ahead of its files, so nothing could safely continue anyway.
//   - Preallocating (fallocate) the files: Badger creates each new memtable,
//     value-log file and table and stores its header in one step, inside
//     Badger, with no hook in between, so the first store of every new file
//     (and of a commit that rotates one) would still be unprotected; and
//     preallocation turns 80 MiB of sparse files (2 x memtable WAL, 2 x value
//     log file) into real, always-used disk.
//
// So the ledger never lets Badger start a write it may not be able to
// finish: before each commit it reads the file system's free space (statfs,
// about a microsecond) and refuses the commit with ErrNoSpace unless the
// commit's own bytes plus a headroom fit. The headroom is what Badger may
// still write through mappings after our last admitted commit without
// another one: the memtables it flushes into level-0 tables (the immutable
// one, and the active one at Close), one level-0 compaction's output before
// its inputs are deleted, and the discard-statistics file (see minFree).
// Value-log GC, which rewrites a value-log file, is held to the same rule.
// A refused commit touches nothing, so Badger's state stays consistent and
// the next commit simply succeeds once space is back: no reopen needed.
//
// At Open, a directory whose file system lacks the headroom is opened
// read-only (Badger's ReadOnly mode makes no writes: no lock file, no new
// memtable or value-log file, no flush), so reads (runs list, runs show, the
// API's GETs) keep working and every write is ErrNoSpace. Badger refuses a
// read-only open of a directory a killed process left unflushed (it would
// have to truncate the log), and replaying that log reads its sparse tail,
// which on tmpfs allocates pages and faults when the file system is full:
// such a directory is not tried read-only but opened in the reserve's space
// (below), or refused with ErrNoSpace when there is no reserve.
//
// A full disk is usually filled by someone else, down to the last byte, after
// our last commit; Badger's Close must still flush the memtable into a table,
// and a read-only open refuses a directory whose write-ahead log was not
// flushed. For both, the ledger keeps a reserve file (reserveName, about two
// memtables: 21 MiB by default, preallocated) made while there is space and
// given back when there is not: Close deletes it when the flush would not fit
// otherwise, and Open, when the directory cannot be opened read-only,
// deletes it and opens for writing (the guard still refuses commits until
// space is back, and then the same handle writes and remakes the reserve).
//
// What this cannot prevent: another process taking the headroom (or the
// reserve just given back) between our check and Badger's writes. If Close
// cannot fit the flush even with the reserve, it leaves the memtable in its
// synced write-ahead log, which the next Open replays, instead of faulting.

// minFree is the default Config.MinFreeBytes: the headroom kept free for
// Badger's writes beyond the commit being admitted.
func minFree(cfg Config) int64 {
	mt := cfg.MemTableSize
	const (
		numMemtables    = 2        // badgerOptions: WithNumMemtables(2)
		l0Tables        = 4        // badgerOptions: WithNumLevelZeroTables(4)
		baseLevelSize   = 10 << 20 // Badger's default BaseLevelSize: the L1 a level-0 compaction rewrites
		discardFileSize = 1 << 20  // Badger's DISCARD file, mapped and written by compactions and GC
	)
	// A flushed table holds the memtable's entries without the skiplist's
	// overhead: at most one memtable size each.
	flushes := numMemtables * mt
	// A level-0 compaction writes its output (about its input: the level-0
	// tables and the overlapping level-1 tables) before deleting its input.
	compaction := l0Tables*mt + baseLevelSize
	return flushes + compaction + discardFileSize
}

// reserveName is the reserve file in the data directory (Badger ignores
// files it does not name).
const reserveName = "docket-space-reserve"

// reserveBytes is the reserve's size: Close's flush of both memtables (or,
// at Open, of what a killed process left), a quarter more for table
// indexes, and a MiB for new log headers and the discard statistics.
func reserveBytes(cfg Config) int64 {
	return 2*cfg.MemTableSize*5/4 + 1<<20
}

// spaceGuard admits writes against the free space of the data directory's
// file system and keeps the reserve.
type spaceGuard struct {
	dir      string
	minFree  int64
	reserve  int64 // reserve file size
	readOnly bool  // opened read-only for lack of space: every write is refused

	mu       sync.Mutex // the committer and value-log GC admit concurrently
	reserved bool       // the reserve file exists
}

func (g *spaceGuard) reservePath() string { return filepath.Join(g.dir, reserveName) }

// keepReserve makes the reserve file when it is missing and free space
// allows it on top of need and the headroom. Failures are logged, not fatal:
// without a reserve the ledger still refuses writes it cannot finish.
func (g *spaceGuard) keepReserve(free, need int64, log *slog.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reserved || g.readOnly {
		return
	}
	if fi, err := os.Stat(g.reservePath()); err == nil && fi.Size() >= g.reserve {
		g.reserved = true
		return
	}
	if free < need+g.minFree+g.reserve {
		return
	}
	if err := preallocate(g.reservePath(), g.reserve); err != nil {
		os.Remove(g.reservePath())
		log.Warn("could not make the free-space reserve", "path", g.reservePath(), "err", err)
		return
	}
	g.reserved = true
}

// releaseReserve deletes the reserve file, giving its space back; it reports
// whether there was one.
func (g *spaceGuard) releaseReserve(log *slog.Logger) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := os.Remove(g.reservePath()); err != nil {
		g.reserved = false
		return false
	}
	g.reserved = false
	log.Warn("file system full: released the free-space reserve", "path", g.reservePath(), "bytes", g.reserve)
	return true
}

// preallocate creates path with size bytes of allocated (not sparse) space,
// synced, so deleting it later really frees that much.
func preallocate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := allocate(f, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeZeros allocates by writing, where fallocate is not available.
func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// commitBytes bounds what committing b writes to Badger's logs: each entry
// goes to the write-ahead log (a value of valueThreshold or more as a pointer,
// with its key, to the value log), with headers and checksums, plus a page
// for each log file a rotation may start.
func commitBytes(b *batch) int64 {
	var n int64
	for _, k := range b.base.order {
		e := b.base.m[k]
		n += 2*int64(len(e.key)) + int64(len(e.val)) + 64
	}
	return n + 2*pageSize
}

const pageSize = 4096

// admit returns nil when need bytes may be written now, leaving the headroom
// free (and remakes the reserve when there is room for it too); else an
// ErrNoSpace saying how much is free and how much is needed.
func (g *spaceGuard) admit(need int64, log *slog.Logger) error {
	if g.readOnly {
		return fmt.Errorf("%w on %s: opened read-only, its file system was full; nothing was written (a process must open it again to write)", ledger.ErrNoSpace, g.dir)
	}
	free, ok := freeBytes(g.dir)
	if !ok {
		return nil
	}
	if free < need+g.minFree {
		return g.noSpace(free, need+g.minFree)
	}
	g.keepReserve(free, need, log)
	return nil
}

func (g *spaceGuard) noSpace(free, want int64) error {
	return fmt.Errorf("%w on %s: %s free, %s needed to write safely; nothing was written: free space and retry",
		ledger.ErrNoSpace, g.dir, sizeString(free), sizeString(want))
}

// flushBytes bounds what Badger's Close writes: the memtables still in
// write-ahead logs (*.mem) become level-0 tables, about as large as the log
// records they come from (a quarter more for block indexes and bloom
// filters); measured by allocated blocks, since the logs are sparse files
// of twice the memtable size.
func flushBytes(dir string) int64 {
	var n int64
	matches, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for _, m := range matches {
		n += allocatedBytes(m)
	}
	return n*5/4 + discardBytes
}

// hasUnflushedLog reports memtable write-ahead logs (*.mem) in dir: a process
// that did not close the directory (killed, or closed without space to
// flush) left them for the next open for writing to replay.
func hasUnflushedLog(dir string) bool {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	return len(matches) > 0
}

// discardBytes is slack for the discard statistics Badger may store at Close.
const discardBytes = 64 << 10

// isNoSpaceErr reports an ENOSPC from Badger, which often formats the
// underlying error into its message instead of wrapping it.
func isNoSpaceErr(err error) bool {
	return err != nil && (errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device"))
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// allocatedBytes is the disk space a file uses (its allocated blocks), or its
// size where blocks are not known.
func allocatedBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if n, ok := blocksOf(fi); ok {
		return n
	}
	return fi.Size()
}
