// Package harness runs flashsale as its users do: the real binaries as
// separate processes over real (throwaway) Redis and MariaDB. The demo, the
// end-to-end tests and the benchmarks are built on it.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/testsrv"
)

// ModuleRoot returns the directory of flashsale's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the flashsale module")
	}
	return filepath.Dir(mod), nil
}

// Build puts the named commands (e.g. "gateway", "worker") into dir.
//
// In a test binary the three commands are compiled once per process (and
// race flag) into a directory of their own, and each Build links them into
// its dir: linking them takes about 5 s of both cores, and the harness's
// tests start some twenty stacks. RemoveBuilds removes that directory.
// Outside tests (make demo, make bench) Build compiles into dir.
func Build(dir string, race bool, cmds ...string) error {
	if !testing.Testing() {
		return compile(dir, race, cmds...)
	}
	src, err := sharedBuild(race)
	if err != nil {
		return err
	}
	return place(src, dir, cmds...)
}

// place puts the binaries cmds of directory src into dir: a hard link
// each, or a copy where src is on another file system.
func place(src, dir string, cmds ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range cmds {
		to := filepath.Join(dir, c)
		_ = os.Remove(to)
		if err := os.Link(filepath.Join(src, c), to); err != nil {
			if err := copyFile(filepath.Join(src, c), to); err != nil {
				return err
			}
		}
	}
	return nil
}

// builds are the directories Build compiled into, by race flag.
var builds struct {
	sync.Mutex
	dirs map[bool]string
}

func sharedBuild(race bool) (string, error) {
	builds.Lock()
	defer builds.Unlock()
	if d, ok := builds.dirs[race]; ok {
		return d, nil
	}
	d, err := os.MkdirTemp("", "flashsale-bin-")
	if err != nil {
		return "", err
	}
	if err := compile(d, race, "gateway", "worker", "reaper"); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	if builds.dirs == nil {
		builds.dirs = map[bool]string{}
	}
	builds.dirs[race] = d
	return d, nil
}

// RemoveBuilds removes what Build compiled for this test binary, and
// stops the mariadbd its stacks shared; its TestMain calls it after the
// tests.
func RemoveBuilds() {
	builds.Lock()
	for race, d := range builds.dirs {
		os.RemoveAll(d)
		delete(builds.dirs, race)
	}
	builds.Unlock()
	shared.Lock()
	defer shared.Unlock()
	if shared.mariadb != nil {
		_ = shared.mariadb.Stop()
		os.RemoveAll(shared.dir)
		shared.mariadb = nil
	}
}

// shared is the mariadbd a test binary's stacks share (Options.OwnMariaDB).
var shared struct {
	sync.Mutex
	mariadb *testsrv.MariaDB
	dir     string
}

// sharedMariaDB starts the test binary's shared mariadbd on first use.
func sharedMariaDB() (*testsrv.MariaDB, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.mariadb != nil {
		return shared.mariadb, nil
	}
	d, err := os.MkdirTemp("", "flashsale-mariadb-")
	if err != nil {
		return nil, err
	}
	m, err := testsrv.StartMariaDB(filepath.Join(d, "mariadb"))
	if err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	shared.mariadb, shared.dir = m, d
	return m, nil
}

// compile builds the named commands into dir.
func compile(dir string, race bool, cmds ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if race {
		args = append(args, "-race")
	}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, stderr.String())
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// Proc is one running flashsale binary.
type Proc struct {
	Name    string
	LogPath string
	// OpsURL is the base URL of its ops listener (/livez, /readyz, /metrics).
	OpsURL string
	// PprofURL is its pprof listener's (when FLASHSALE_PPROF=true).
	PprofURL string
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
}

// Start runs bin with args and env (added to this process's environment,
// minus any FLASHSALE_ variable of ours), logging to logDir/name.log.
func Start(name, bin string, env []string, logDir string, args ...string) (*Proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	testsrv.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHSALE_") {
			out = append(out, kv)
		}
	}
	return out
}

// Run runs bin to completion (e.g. "worker migrate") and returns its output on failure.
func Run(ctx context.Context, bin string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// owns is nil when the process listens on port itself, errPortTaken when
// it does not and has exited (another process answers its address).
func (p *Proc) owns(port int) error {
	mine, err := testsrv.ListensOn(p.Pid(), port)
	switch {
	case err == nil && mine:
		return nil
	case p.Exited():
		return fmt.Errorf("port %d: %w", port, errPortTaken)
	case err != nil:
		return err
	}
	return fmt.Errorf("port %d answers, but not from %s yet", port, p.Name)
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill is kill -9.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and waits up to timeout for a clean exit; it returns
// the exit error (nil for status 0) or an error if it had to kill.
func (p *Proc) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM", p.Name, timeout)
	}
}

// Signal sends sig (e.g. SIGSTOP, SIGCONT).
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits for the process to exit and returns its exit error.
func (p *Proc) Wait() error { <-p.done; return p.err }

// Log returns what the process logged so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}
