//go:build !linux

package badgerdb

// trimMapped is a no-op where MADV_PAGEOUT is not available.
func trimMapped(string) {}
