//go:build linux

package testsrv

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd's process die with the process that starts it
// (Linux's parent-death signal), so an aborted test run leaves no server
// or binary behind.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
