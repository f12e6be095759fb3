package badgerdb

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// TestLedgerBytes prints what the records of a data directory weigh, by
// kind (keys.go): count and bytes (key + value), and then what they take on
// disk, as the sizes of the table and value-log files (Badger's tables are
// block-compressed with Snappy, with its per-entry overhead; values of
// valueThreshold bytes or more are in the value log, uncompressed): of a
// copy of the directory after Close flushed its memtable (every version
// of a rewritten record is still there until a compaction), and compacted
// (only the live records, written into a fresh directory). The directory itself is not
// written. A measurement, not a check: it runs only when LEDGER_BYTES names
// a directory (the README's bytes per step come from it, after a `docket
// run`); LEDGER_BYTES_STEPS=N also prints each total divided by N:
//
//	LEDGER_BYTES=./docket-data LEDGER_BYTES_STEPS=1000 go test -run TestLedgerBytes -v ./ledger/badgerdb
func TestLedgerBytes(t *testing.T) {
	dir := os.Getenv("LEDGER_BYTES")
	if dir == "" {
		t.Skip("LEDGER_BYTES=DIR prints the bytes of a data directory's records")
	}
	steps, _ := strconv.Atoi(os.Getenv("LEDGER_BYTES_STEPS"))
	perStep := func(n int64) string {
		if steps <= 0 {
			return ""
		}
		return ", " + strconv.FormatFloat(float64(n)/float64(steps), 'f', 1, 64) + " B per step"
	}
	cp := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(cp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o700)
		}
		return os.Chmod(p, 0o600)
	}); err != nil {
		t.Fatal(err)
	}
	l, err := Open(context.Background(), Config{Dir: cp})
	if err != nil {
		t.Fatal(err)
	}
	sizes, counts := map[byte]int64{}, map[byte]int{}
	err = l.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			sizes[k[0]] += int64(len(k)) + int64(it.Item().ValueSize())
			counts[k[0]]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.cfg
	if err := l.Close(); err != nil { // flushes the memtable into a table
		t.Fatal(err)
	}
	var kinds []int
	var total int64
	for k, n := range sizes {
		kinds = append(kinds, int(k))
		total += n
	}
	sort.Ints(kinds)
	for _, k := range kinds {
		t.Logf("%c: %d records, %d bytes%s", k, counts[byte(k)], sizes[byte(k)], perStep(sizes[byte(k)]))
	}
	t.Logf("records: %d bytes (keys + values)%s", total, perStep(total))

	sst, vlog := dirBytes(t, cp)
	t.Logf("on disk, flushed: tables %d bytes%s, value log %d bytes%s, total %d bytes%s",
		sst, perStep(sst), vlog, perStep(vlog), sst+vlog, perStep(sst+vlog))
	// Compacted: the live records (one version of each key, as a full
	// compaction leaves them) written into a fresh directory with the
	// ledger's options, flushed.
	fresh := filepath.Join(t.TempDir(), "compacted")
	src, err := badger.Open(badgerOptions(cfg, cfg.Logger).WithReadOnly(true))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := badger.Open(badgerOptions(cfg, cfg.Logger).WithDir(fresh).WithValueDir(fresh))
	if err != nil {
		t.Fatal(err)
	}
	wb := dst.NewWriteBatch()
	err = src.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := wb.Set(it.Item().KeyCopy(nil), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = wb.Flush()
	}
	if err := errors.Join(err, src.Close(), dst.Close()); err != nil {
		t.Fatal(err)
	}
	sst, vlog = dirBytes(t, fresh)
	t.Logf("on disk, compacted: tables %d bytes%s, value log %d bytes%s, total %d bytes%s",
		sst, perStep(sst), vlog, perStep(vlog), sst+vlog, perStep(sst+vlog))
}

// dirBytes returns the sizes of a Badger directory's table and value-log
// files.
func dirBytes(t *testing.T, dir string) (sst, vlog int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(e.Name(), ".sst"):
			sst += fi.Size()
		case strings.HasSuffix(e.Name(), ".vlog"):
			vlog += fi.Size()
		}
	}
	return sst, vlog
}
