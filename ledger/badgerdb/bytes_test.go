package badgerdb

import (
	"context"
	"os"
	"sort"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// TestLedgerBytes prints what the records of a data directory weigh, by
// kind (keys.go): count and bytes (key + value). A measurement, not a check:
// it runs only when LEDGER_BYTES names a directory (the README's bytes per
// step come from it, after a `docket run`):
//
//	LEDGER_BYTES=./docket-data go test -run TestLedgerBytes -v ./ledger/badgerdb
func TestLedgerBytes(t *testing.T) {
	dir := os.Getenv("LEDGER_BYTES")
	if dir == "" {
		t.Skip("LEDGER_BYTES=DIR prints the bytes of a data directory's records")
	}
	l, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
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
	var kinds []int
	var total int64
	for k, n := range sizes {
		kinds = append(kinds, int(k))
		total += n
	}
	sort.Ints(kinds)
	for _, k := range kinds {
		t.Logf("%c: %d records, %d bytes", k, counts[byte(k)], sizes[byte(k)])
	}
	t.Logf("total: %d bytes", total)
}
