//go:build linux

package badgerdb

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// freeBytes is the space available to the process on dir's file system
// (statfs f_bavail: without the blocks reserved for root, which Badger's
// mappings may not get either), or ok=false when it cannot be read.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// blocksOf is the space a file's allocated blocks take.
func blocksOf(fi fs.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Blocks * 512, true
}

// allocate gives f size bytes of allocated blocks (fallocate), or writes
// zeros where the file system does not support it.
func allocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return writeZeros(f, size)
	}
	return err
}
