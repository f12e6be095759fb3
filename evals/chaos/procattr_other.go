//go:build !linux

package chaos

import "os/exec"

// setParentDeath does nothing where the kernel cannot kill a child with its
// parent; an interrupted harness may leave children running there.
func setParentDeath(cmd *exec.Cmd) {}
