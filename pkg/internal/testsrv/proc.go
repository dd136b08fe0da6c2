// Package testsrv starts throwaway redis-server and mariadbd processes in a
// temporary directory on free loopback ports, for tests, the demo and the
// benchmarks. Nothing here touches the machine's shared instances.
package testsrv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// InstallHint is the command that provides the servers on Debian.
const InstallHint = "apt-get install -y redis-server mariadb-server"

// LookPath finds a server binary on PATH or in the sbin directories Debian
// installs daemons to (which a non-root PATH often lacks).
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found; install it with: %s", name, InstallHint)
}

// handedOut are the ports FreePort returned in this process: the kernel
// may give a port it just gave again once its listener is closed, and two
// listeners of one stack (a gateway's API and ops ports, picked a moment
// apart) must not be given the same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback TCP port that was free a moment ago and
// that it never returned before in this process.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no loopback port left that was not handed out already")
}

// server is one supervised server process that can be stopped, killed and
// started again on the same port and data directory.
type server struct {
	name    string
	bin     string
	args    []string
	logPath string
	ready   func() error
	cmd     *exec.Cmd
	done    chan struct{}
}

func (s *server) start() error {
	if s.cmd != nil {
		return fmt.Errorf("%s already running", s.name)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Die with the process that started us, so an aborted test run leaves
	// no server behind.
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}(s.done)

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.ready()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			s.cmd = nil
			return fmt.Errorf("%s exited during start-up (log %s): %w", s.name, s.logPath, err)
		default:
		}
		if time.Now().After(deadline) {
			_ = s.kill()
			return fmt.Errorf("%s not ready after 30s (log %s): %w", s.name, s.logPath, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) signal(sig syscall.Signal, wait time.Duration) error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(wait):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
	return nil
}

// stop asks the server to shut down cleanly.
func (s *server) stop() error { return s.signal(syscall.SIGTERM, 30*time.Second) }

// kill is kill -9: no clean shutdown, whatever was not durable is lost.
func (s *server) kill() error { return s.signal(syscall.SIGKILL, 10*time.Second) }

// onPort starts srv, trying fresh ports when the chosen one was taken in the
// meantime; setPort rebuilds the arguments for a port.
func onPort(srv *server, setPort func(int)) error {
	var errs []error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return err
		}
		setPort(port)
		if err = srv.start(); err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func itoa(i int) string { return strconv.Itoa(i) }

// pause stops the server's process (SIGSTOP): its connections stay open and
// nothing answers, as with a hung host. resume lets it go on (SIGCONT).
// pause stops the server (SIGSTOP) and returns once every thread of it
// has stopped: a thread in the middle of a system call finishes it first
// (a reply being written goes out), and on a busy machine a test that
// acted right after the signal found the server still answering.
func (s *server) pause() error {
	if s.cmd == nil {
		return fmt.Errorf("%s not running", s.name)
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); !allStopped(s.cmd.Process.Pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not every thread stopped 10 s after SIGSTOP", s.name)
		}
	}
	return nil
}

// allStopped reports whether every thread of process pid is stopped
// (state T or t in /proc/pid/task/*/stat), or pid is gone.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return true
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		// pid (comm) STATE ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
			return false
		}
	}
	return true
}

func (s *server) resume() error {
	if s.cmd == nil {
		return fmt.Errorf("%s not running", s.name)
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

// ListensOn reports whether process pid holds a listening TCP socket on
// port, in its own network namespace: whether an address answering is
// that process's, not another test process's that took a port found
// free a moment before (go test runs packages in processes of their own).
func ListensOn(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)           // sl local_address rem_address st ... inode
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes[f[9]] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}
