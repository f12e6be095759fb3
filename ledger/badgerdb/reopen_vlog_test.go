package badgerdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// TestOpenAfterEmptyValueLog reproduces what the chaos harness saw after
// SIGKILLs (about 0.3% of kills): the killed process left an empty value-log
// file, and the next badger.Open fails once with "Create a new file" while
// opening it; a second open succeeds. Open must retry once instead of
// reporting the crash leftover as an error.
func TestOpenAfterEmptyValueLog(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	sort.Strings(vlogs)
	if len(vlogs) == 0 {
		t.Fatalf("no value-log file in %s", dir)
	}
	// An empty value-log file after the last one, as a process killed right
	// after creating it leaves behind.
	var last int
	for _, v := range vlogs {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(v), "%06d.vlog", &n); err == nil && n > last {
			last = n
		}
	}
	empty := filepath.Join(dir, vlogName(last+1))
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err = Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatalf("open after an empty value-log file %s: %v", filepath.Base(empty), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func vlogName(n int) string { return fmt.Sprintf("%06d.vlog", n) }
