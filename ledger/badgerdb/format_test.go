package badgerdb_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
)

// olderFormats are data directories written by development builds before
// the current format, committed so that a build proves it refuses them
// without changing them:
//   - format-json-events: format "1" with JSON event and key records;
//   - format-binary-v1: format "1" with binary events and key records that
//     held every field, keys as text in Badger keys.
var olderFormats = []string{"testdata/format-json-events", "testdata/format-binary-v1"}

// copyDir copies a fixture directory into a writable one.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	// CopyFS makes read-only copies of read-only files: the ledger writes.
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			mode := os.FileMode(0o600)
			if d.IsDir() {
				mode = 0o700
			}
			err = os.Chmod(p, mode)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// records returns every record of a closed Badger directory (key -> value).
func records(t *testing.T, dir string) map[string]string {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithReadOnly(true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs := map[string]string{}
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			recs[string(it.Item().Key())] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A directory of an older format is refused at Open with ErrFormat and a
// message saying what it is and what to do; nothing in it changes, and it is
// refused again the next time.
func TestOpenRefusesOlderFormat(t *testing.T) {
	t.Parallel()
	// Format "2" (compact keys, half audit hashes, key records leaving
	// their args to rows): its format record is all Open reads.
	format2 := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(format2).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		return errors.Join(txn.Set([]byte("v\x00format"), []byte("2")), txn.Set([]byte("h\x00r"), []byte{1, 2, '{', '}'}))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{"format-2": format2}
	for _, f := range olderFormats {
		dirs[filepath.Base(f)] = copyDir(t, f)
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			before := records(t, dir)
			if len(before) < 2 {
				t.Fatalf("fixture with %d records", len(before))
			}
			for range 2 {
				l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir})
				if err == nil {
					l.Close()
					t.Fatal("an older format opened")
				}
				var fe *badgerdb.FormatError
				if !errors.Is(err, ledger.ErrFormat) || !errors.As(err, &fe) || fe.Have == "" {
					t.Fatalf("Open: %v, want a *badgerdb.FormatError (ledger.ErrFormat)", err)
				}
				for _, want := range []string{dir, "data directory format \"" + fe.Have + "\"", "development build",
					"None of its records was changed", "new directory"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("Open: %q does not say %q", err, want)
					}
				}
				t.Logf("error: %v", err)
			}
			if after := records(t, dir); !maps.Equal(after, before) {
				t.Fatalf("records changed by a refused open: %d, were %d", len(after), len(before))
			}
		})
	}
}
