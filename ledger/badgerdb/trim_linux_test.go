//go:build linux

package badgerdb

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestTrimMappedHandsBackTablePages: the pages of tables (.sst) a read
// touched and of the memtable log (.mem) a write filled are resident until
// trimMapped hands them back; what is read afterwards is unchanged. Real
// Badger, real files, the kernel's own accounting (/proc/self/smaps).
func TestTrimMappedHandsBackTablePages(t *testing.T) {
	dir := t.TempDir()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil && fs.Type == 0x01021994 {
		// tmpfs pages are memory: without swap they cannot be paged out.
		t.Skip("the temporary directory is on tmpfs, whose pages MADV_PAGEOUT cannot reclaim without swap")
	}
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	cfg := Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.WithDefaults()
	put := func(db *badger.DB, n, from int) map[string][]byte {
		want := make(map[string][]byte, n)
		for i := from; i < from+n; {
			wb := db.NewWriteBatch()
			for j := 0; j < 500 && i < from+n; j, i = j+1, i+1 {
				v := make([]byte, 200+rng.IntN(800)) // under the value threshold: stays in the LSM tree
				for k := range v {
					v[k] = byte(rng.IntN(256))
				}
				k := fmt.Sprintf("key-%08d", i)
				want[k] = v
				if err := wb.Set([]byte(k), v); err != nil {
					t.Fatal(err)
				}
			}
			if err := wb.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		return want
	}
	db, err := badger.Open(badgerOptions(cfg, cfg.Logger))
	if err != nil {
		t.Fatal(err)
	}
	want := put(db, 8000, 0)           // ≈5 MiB
	if err := db.Close(); err != nil { // flushes the memtable into a table
		t.Fatal(err)
	}
	db, err = badger.Open(badgerOptions(cfg, cfg.Logger))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	maps.Copy(want, put(db, 2000, len(want))) // into the new memtable and its log
	readAll := func() {
		t.Helper()
		n := 0
		err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				k := string(it.Item().Key())
				if err := it.Item().Value(func(v []byte) error {
					if string(v) != string(want[k]) {
						return fmt.Errorf("%s: read %d bytes, wrote %d", k, len(v), len(want[k]))
					}
					return nil
				}); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != len(want) {
			t.Fatalf("read %d keys, wrote %d", n, len(want))
		}
	}
	readAll()
	sst, mem := residentKiB(t, dir, ".sst"), residentKiB(t, dir, ".mem")
	if sst < 512 || mem < 256 {
		t.Fatalf("before the trim: %d KiB of tables and %d KiB of memtable log resident; the test wrote too little to see a trim", sst, mem)
	}
	trimMapped(dir)
	sst2, mem2 := residentKiB(t, dir, ".sst"), residentKiB(t, dir, ".mem")
	t.Logf("resident: tables %d → %d KiB, memtable log %d → %d KiB", sst, sst2, mem, mem2)
	if sst2 > sst/4 || mem2 > mem/4 {
		t.Errorf("after the trim: tables %d KiB (was %d), memtable log %d KiB (was %d): pages not handed back", sst2, sst, mem2, mem)
	}
	readAll() // the pages come back from the files, unchanged
}

// residentKiB sums the resident pages of this process's mappings of dir's
// files named *ext.
func residentKiB(t *testing.T, dir, ext string) int64 {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var total int64
	var in bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && len(fields) >= 5 {
			in = len(fields) >= 6 && filepath.Dir(fields[5]) == abs && filepath.Ext(fields[5]) == ext
			continue
		}
		if in && fields[0] == "Rss:" && len(fields) >= 2 {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			total += n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}
