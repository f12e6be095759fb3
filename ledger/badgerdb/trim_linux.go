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

// trimValueLog asks the kernel to reclaim the pages of Badger's value-log
// files mapped into this process. Badger writes the value log through a
// shared file mapping and keeps every file mapped, so each output written
// stays in the process's resident set (file-backed, clean once synced) until
// the kernel needs the memory: without this, RSS grows with the data written.
// Values are read back rarely (outputs of runs being shown or resumed).
func trimValueLog(dir string) {
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
		if len(fields) < 6 || !strings.HasSuffix(fields[5], ".vlog") || filepath.Dir(fields[5]) != abs {
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
