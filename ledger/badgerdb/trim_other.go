//go:build !linux

package ledger

// trimValueLog is a no-op where MADV_PAGEOUT is not available.
func trimValueLog(string) {}
