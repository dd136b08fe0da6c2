package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns a process's peak resident set size (VmHWM) in bytes.
func PeakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM:") }

// procStatus reads a size in kB of /proc/PID/status (its field name with
// the colon), in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// RSS returns a process's resident set size now (VmRSS) in bytes.
func RSS(pid int) (int64, error) { return procStatus(pid, "VmRSS:") }
