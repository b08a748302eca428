package check

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the child when the thread that started it exits.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
