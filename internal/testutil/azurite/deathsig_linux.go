package azurite

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill Azurite when the test binary dies,
// even by SIGKILL or a panic that skips every cleanup.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
