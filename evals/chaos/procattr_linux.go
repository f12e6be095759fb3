package chaos

import (
	"os/exec"
	"syscall"
)

// setParentDeath makes the kernel kill the child if the harness dies, so an
// interrupted harness leaves no docket process holding a data directory.
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
