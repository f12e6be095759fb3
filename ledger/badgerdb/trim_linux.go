//go:build linux

package badgerdb

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4+): reclaim the pages of a range. It
// is a hint that never changes memory contents (a file page comes back from
// the file on the next access), so a range Badger unmaps (or reuses) in the
// meantime cannot be harmed.
const madvPageout = 21

// trimMapped asks the kernel to reclaim the pages of the files Badger maps
// into this process from dir: value-log files (.vlog), tables (.sst) and
// memtable logs (.mem). Badger writes all three through shared file
// mappings and keeps them mapped (a table from when it is written until
// compaction deletes it, a memtable log until its flush, a value-log file
// until GC), so every byte written stays in the process's resident set
// (file-backed, clean once synced) until the kernel needs the memory:
// without this, RSS grows with the data written. Values and tables are read
// back through Badger's caches and, rarely, the page cache.
func trimMapped(dir string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !trimmable(fields[5]) || filepath.Dir(fields[5]) != abs {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), madvPageout)
	}
}

// trimmable reports whether trimMapped hands back the pages of a file.
func trimmable(path string) bool {
	switch filepath.Ext(path) {
	case ".vlog", ".sst", ".mem":
		return true
	}
	return false
}
