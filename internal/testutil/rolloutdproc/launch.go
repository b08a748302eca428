package rolloutdproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Launch starts binary as Start does, outside a test (a benchmark that runs
// rolloutd as a process of its own): the caller stops it with Stop. Only
// Stop, CPUSeconds, Output, Exited and ExitErr may be used on it; the
// methods that fail a test need one.
func Launch(binary string, o Options) (*Proc, error) {
	return launch(binary, o, nil)
}

// Stop sends SIGTERM, waits up to within for the exit and kills the
// process past it, then closes the client. It fails when the process
// reported a data race or a panic, or had to be killed.
func (p *Proc) Stop(within time.Duration) error {
	var errs []error
	select {
	case <-p.exited:
	default:
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(within):
			errs = append(errs, fmt.Errorf("%s did not exit within %v of SIGTERM: killed", p.Name, within))
		}
	}
	p.kill()
	if out := p.Output(); strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
		errs = append(errs, fmt.Errorf("%s reported a data race or a panic", p.Name))
	}
	return errors.Join(errs...)
}

// CPUSeconds is the CPU time, user and system, the process has used so
// far, from /proc/PID/stat (Linux; in ticks of USER_HZ, 100 a second).
func (p *Proc) CPUSeconds() (float64, error) {
	return ProcessCPUSeconds(p.Cmd.Process.Pid)
}

// ProcessCPUSeconds reads the utime and stime of process pid from
// /proc/PID/stat, in seconds.
func ProcessCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses, so
	// the fields count from after its last ')'.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return (ut + st) / userHZ, nil
}

// userHZ is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on
// every Linux architecture Go supports.
const userHZ = 100
