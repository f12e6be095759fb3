//go:build !linux

package badgerdb

// trimValueLog is a no-op where MADV_PAGEOUT is not available.
func trimValueLog(string) {}
