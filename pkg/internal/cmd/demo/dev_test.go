package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
)

// dev is make dev's stack, shared by the tests of this file:
// TestDevStackComesUpAndStops, after the docs' examples, stops it with
// Ctrl-C (a test after it would start another).
type dev struct {
	dir     string // make's BIN: the demo binary it builds, removed after the tests
	cmd     *exec.Cmd
	tty     *os.File // the pseudo-terminal's side make's terminal is the other of
	lines   chan string
	text    string // what it printed until it was up
	exports string // its export lines, as printed
}

var (
	devMu    sync.Mutex
	devStack *dev
)

// startDev runs make dev as a reader does, in a terminal (a
// pseudo-terminal), on any free port (8080 may be another run's), and
// reads what it prints until it is up.
func startDev(t *testing.T) *dev {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	devMu.Lock()
	defer devMu.Unlock()
	if devStack == nil || devStack.cmd.ProcessState != nil {
		if devStack != nil { // stopped by an earlier test
			devStack.tty.Close()
			_ = os.RemoveAll(devStack.dir)
		}
		var err error
		devStack, err = newDev()
		require.NoError(t, err)
	}
	return devStack
}

func newDev() (*dev, error) {
	root, err := harness.ModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "flashsale-dev-test-")
	if err != nil {
		return nil, err
	}
	tty, term, err := openPTY()
	if err != nil {
		return nil, err
	}
	defer term.Close() // make's now, once started
	// The recipe as written, but its prerequisites: the servers are the
	// tests', and bin/'s binaries are the tests' shared build, put in BIN,
	// a directory of the test's, beforehand (-o: take them as made); the
	// demo binary the recipe builds goes there too, and runs them.
	if err := harness.Build(dir, false, "gateway", "worker", "reaper"); err != nil {
		return nil, err
	}
	d := &dev{dir: dir, tty: tty, lines: make(chan string, 100),
		cmd: exec.Command("make", "--no-print-directory", "-C", root, "-o", "servers", "-o", "build", "dev",
			"BIN="+dir, "DEV_PORT=0", "DEMO_FLAGS=-workers 1")}
	d.cmd.Env = os.Environ()
	d.cmd.Stdin, d.cmd.Stdout, d.cmd.Stderr = term, term, term
	// make leads a session whose controlling terminal is term, as a
	// shell's job would: the terminal's Ctrl-C reaches its foreground.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(tty) // ends (EIO) once every process on the terminal's side has closed it
		for sc.Scan() {
			d.lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(d.lines)
	}()
	var printed strings.Builder
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(printed.String(), "bin/reaper report") {
		select {
		case l, ok := <-d.lines:
			if !ok {
				return nil, fmt.Errorf("make dev ended before it was up:\n%s", printed.String())
			}
			printed.WriteString(l + "\n")
		case <-deadline:
			d.interrupt()
			return nil, fmt.Errorf("make dev not up within 3 minutes:\n%s", printed.String())
		}
	}
	d.text = printed.String()
	for _, l := range strings.Split(d.text, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "export ") {
			d.exports += l + "\n"
		}
	}
	return d, nil
}

// interrupt types Ctrl-C in make dev's terminal.
func (d *dev) interrupt() { _, _ = d.tty.Write([]byte{3}) }

// openPTY opens a pseudo-terminal: tty is the side a terminal emulator
// holds (what is typed is written to it, what is shown read from it),
// term the side the programs run on.
func openPTY() (tty, term *os.File, err error) {
	tty, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(tty.Fd())
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0) // unlock
	}
	if err == nil {
		term, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("a pseudo-terminal: %w", err)
	}
	return tty, term, nil
}

// exported is the value make dev's exports give name.
func (d *dev) exported(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", d.exports+`printf %s "$`+name+`"`).Output()
	require.NoError(t, err)
	require.NotEmpty(t, out, "make dev exports no %s:\n%s", name, d.text)
	return string(out)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if devStack != nil {
		if devStack.cmd.ProcessState == nil { // a test failed before Ctrl-C
			devStack.interrupt()
			stopped := make(chan struct{})
			go func() { _ = devStack.cmd.Wait(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(time.Minute):
				_ = devStack.cmd.Process.Kill()
			}
		}
		devStack.tty.Close()
		_ = os.RemoveAll(devStack.dir)
	}
	os.Exit(code)
}

// example is one command of a document's sh blocks, with the answers
// documented under it ("# (HTTP 202) {...}": the status, which curl does
// not print, then the body it does); setup commands (NAME=value, not a
// curl) have none.
type example struct {
	line    int
	command string
	answers []answer
}

type answer struct {
	status int
	body   string // as documented: JSON, often with "..." for the rest
}

// docExamples reads the commands of doc's sh blocks, in order: each curl
// (alone, or read into a variable: V=$(curl ...)) with its documented
// answers, and each variable set alone for them (ENDS=$(date ...)). Other
// lines (bin/ commands, with or without variables, comments) are for the
// reader.
func docExamples(t *testing.T, doc string) []example {
	t.Helper()
	var out []example
	lines := strings.Split(doc, "\n")
	inSh := false
	documented := regexp.MustCompile(`^# \(HTTP (\d{3})\) (.*)$`)
	assign := regexp.MustCompile(`^[A-Z_]+=\$\(.*\)\s*(#.*)?$`) // a variable alone: not FLASHSALE_X=... bin/worker
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(l, "```"):
			inSh = false
			continue
		}
		isCurl := strings.HasPrefix(l, "curl ") || regexp.MustCompile(`^[A-Z_]+=\$\(curl `).MatchString(l)
		if !inSh || (!isCurl && !assign.MatchString(l)) {
			continue
		}
		ex := example{line: i + 1}
		for strings.HasSuffix(l, "\\") { // continuation lines
			ex.command += l + "\n"
			i++
			l = lines[i]
		}
		ex.command += l
		for isCurl && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "#") {
			i++
			if m := documented.FindStringSubmatch(lines[i]); m != nil {
				st, _ := strconv.Atoi(m[1])
				ex.answers = append(ex.answers, answer{st, m[2]})
			}
		}
		require.True(t, !isCurl || len(ex.answers) > 0, "line %d: a curl example without its documented answer", ex.line)
		out = append(out, ex)
	}
	return out
}

// shell is a bash session in which make dev's exports were pasted, as a
// reader's; curl in it is a function that runs curl and notes each
// answer (status and body) for the test, passing the body on unchanged.
type shell struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	calls  string
	seen   int
	marker int
}

func newShell(t *testing.T, d *dev) *shell {
	t.Helper()
	sh := &shell{cmd: exec.Command("bash", "--noprofile", "--norc"), calls: filepath.Join(t.TempDir(), "calls")}
	var err error
	sh.in, err = sh.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := sh.cmd.StdoutPipe()
	require.NoError(t, err)
	sh.out = bufio.NewReader(stdout)
	sh.cmd.Stderr = io.Discard // tee /dev/stderr: what a reader sees
	require.NoError(t, sh.cmd.Start())
	t.Cleanup(func() { sh.in.Close(); _ = sh.cmd.Wait() })
	sh.run(t, d.exports+`CALLS=`+sh.calls+`
curl() {
	local out rc
	out=$(command curl -sS -w '\n%{http_code}' "$@"); rc=$?
	printf '%s %s\n' "${out##*$'\n'}" "$(printf '%s' "${out%$'\n'*}" | base64 -w0)" >> "$CALLS"
	printf '%s\n' "${out%$'\n'*}"
	return $rc
}`)
	return sh
}

// run runs command in the session and returns what it printed.
func (sh *shell) run(t *testing.T, command string) string {
	t.Helper()
	sh.marker++
	done := fmt.Sprintf("__done_%d__", sh.marker)
	_, err := fmt.Fprintf(sh.in, "%s\nprintf '\\n%s\\n'\n", command, done)
	require.NoError(t, err)
	var out strings.Builder
	for {
		l, err := sh.out.ReadString('\n')
		require.NoError(t, err, "the shell ended: %s", out.String())
		if strings.TrimSpace(l) == done {
			return out.String()
		}
		out.WriteString(l)
	}
}

// lastAnswer is the answer of the last curl run since the last call.
func (sh *shell) lastAnswer(t *testing.T) (int, string, bool) {
	t.Helper()
	raw, err := os.ReadFile(sh.calls)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) <= sh.seen {
		return 0, "", false
	}
	last := lines[len(lines)-1]
	sh.seen = len(lines)
	status, b64, _ := strings.Cut(last, " ")
	st, err := strconv.Atoi(status)
	require.NoError(t, err, last)
	body, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err, last)
	return st, string(body), true
}

// The examples of the README and of docs/API.md run as written, in
// order, in a shell with make dev's exports pasted, against make dev's
// stack: no port, id or date rewritten. Each answers what its document
// says: its status and, for an error, its code; for a success, the
// fields shown. A command documented with several answers is the docs'
// "ask again": it is run again until it gets the last one; an order not
// yet persisted is asked again, as the API says to. Every key the stack's
// Redis then holds is in the key layout.
func TestTheDocsExamplesRunAsWritten(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("no jq: apt-get install -y jq (make test installs it)")
	}
	d := startDev(t)
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	for file, least := range map[string]int{"README.md": 5, "docs/API.md": 15} {
		raw, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		examples := docExamples(t, string(raw))
		require.GreaterOrEqual(t, len(examples), least, "%s's examples", file)
		sh := newShell(t, d) // each file read from its start, in a shell of its own
		for _, ex := range examples {
			runExample(t, sh, file, ex)
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: d.exported(t, "FLASHSALE_REDIS_ADDR")})
	defer rc.Close()
	requireKeysDocumented(t, rc, root)
}

// make dev comes up: servers, roles and console keep running, and what it
// prints works as printed (its commands, pasted after its exports, make
// a voucher, claim and read the events; the console opens); Ctrl-C
// stops it cleanly. It runs after the docs' examples, on the same stack.
func TestDevStackComesUpAndStops(t *testing.T) {
	d := startDev(t)
	for _, v := range []string{"GATEWAY", "ADMIN", "TOKEN", "EVENTS", "FLASHSALE_ADMIN_TOKEN", "FLASHSALE_JWT_SECRET", "FLASHSALE_REDIS_ADDR", "FLASHSALE_MYSQL_DSN"} {
		require.Contains(t, d.exports, "export "+v+"=", d.text)
	}
	_, then, ok := strings.Cut(d.text, "then, as README.md's")
	require.True(t, ok, d.text)
	var commands []string // the printed commands but bin/'s, whole (continuation lines joined)
	for _, l := range strings.Split(then, "\n")[1:] {
		l = strings.TrimSpace(l)
		switch {
		case len(commands) > 0 && strings.HasSuffix(commands[len(commands)-1], "\\"):
			commands[len(commands)-1] += "\n" + l
		case strings.HasPrefix(l, "V=") || strings.HasPrefix(l, "curl "):
			commands = append(commands, l)
		}
	}
	require.Len(t, commands, 3, "a voucher, a claim, the events: %s", then)
	sh := newShell(t, d)
	sh.run(t, commands[0])
	status, body, _ := sh.lastAnswer(t)
	require.Equal(t, 201, status, "the printed voucher: %s", body)
	require.Regexp(t, `^\d+$`, strings.TrimSpace(sh.run(t, "echo $V")), "V holds the voucher's id")
	sh.run(t, commands[1])
	status, body, _ = sh.lastAnswer(t)
	require.Equal(t, 202, status, "the printed claim is admitted: %s", body)
	testenv.Eventually(t, time.Minute, "the claim's order.created in the events API", func() bool {
		sh.run(t, commands[2])
		_, body, _ := sh.lastAnswer(t)
		return strings.Contains(body, `"type":"order.created"`)
	})

	// Each step said as it ended, and every role's ops address, which
	// answers.
	// A step's time is a Go duration: "110ms", "8.17s", "1m17.05s" (the
	// mariadbd, on a loaded machine).
	for _, step := range []string{"binaries from ", "redis up at", "mariadbd up", "migrations applied", "gateway up at", "1 worker started", "reaper started"} {
		require.Regexp(t, `(?m)^\S+  `+regexp.QuoteMeta(step)+`.* \((\d+m)?[0-9.]+m?s\)$`, d.text, "the step %q, with its time", step)
	}
	ops := regexp.MustCompile(`(?m)^  (gateway|worker-\d+|reaper) ops\s+(http://\S+)/metrics`).FindAllStringSubmatch(d.text, -1)
	roles := map[string]bool{}
	for _, m := range ops {
		roles[regexp.MustCompile(`-\d+$`).ReplaceAllString(m[1], "")] = true
		res, err := http.Get(m[2] + "/readyz")
		require.NoError(t, err, m[1])
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "%s's ops address answers", m[1])
	}
	require.Equal(t, map[string]bool{"gateway": true, "worker": true, "reaper": true}, roles, "every role's ops address: %s", d.text)

	console := regexp.MustCompile(`console\s+(\S+)#token=(\S+)`).FindStringSubmatch(d.text)
	require.NotNil(t, console, d.text)
	res, err := http.Get(console[1])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	// Ctrl-C in its terminal: the stack stops, says so, and make exits 0
	// (make, interrupted itself, would exit 130).
	d.interrupt()
	done := make(chan error, 1)
	var after strings.Builder
	go func() {
		for l := range d.lines {
			after.WriteString(l + "\n")
		}
		done <- d.cmd.Wait()
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "make dev exits 0 on Ctrl-C:\n%s", after.String())
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after Ctrl-C")
	}
	require.Regexp(t, `(?m)^\S+  stopping\n(?s:.*)^\S+  stopped$`, after.String())
}

// runExample runs ex in sh and checks its answer.
func runExample(t *testing.T, sh *shell, file string, ex example) {
	t.Helper()
	if len(ex.answers) == 0 { // a variable for what follows
		sh.run(t, ex.command)
		return
	}
	want := ex.answers[len(ex.answers)-1]
	var status int
	var body string
	// A reader asks again while the answer is one the example says comes
	// first, or the order is still pending; the answer it ends with is
	// checked below.
	_ = wait.Until(context.Background(), 30*time.Second, "the answer documented last", func() (bool, string) {
		printed := sh.run(t, ex.command)
		var ok bool
		status, body, ok = sh.lastAnswer(t)
		require.True(t, ok, "%s line %d ran no curl: %s\n%s", file, ex.line, ex.command, printed)
		again := (len(ex.answers) > 1 && !matches(want, status, body)) ||
			(status == 409 && strings.Contains(body, `"order_pending"`))
		return !again, ""
	})
	assert.True(t, matches(want, status, body), "%s line %d: %s\ndocumented %d %s\nanswered   %d %s",
		file, ex.line, ex.command, want.status, want.body, status, body)
}

// requireKeysDocumented holds every key in the stack's Redis to the key
// layout written in pkg/rdb/keys.go: each must match one of its lines.
func requireKeysDocumented(t *testing.T, rc *redis.Client, root string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "pkg", "rdb", "keys.go"))
	require.NoError(t, err)
	var layout []*regexp.Regexp
	for _, l := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(l, "//"))
		if !strings.HasPrefix(l, "//\tflashsale:") || len(f) == 0 {
			continue
		}
		p := regexp.QuoteMeta(f[0])
		for from, to := range map[string]string{`\{pP\}`: `\{p\d+\}`, `:v:V`: `:v:\d+(:b\d+)?`, `YYYYMMDD`: `\d{8}`,
			`:idem:U:K`: `:idem:[^:]+:.+`, `:proof:S`: `:proof:.+`, `:alive:C`: `:alive:.+`} {
			p = strings.ReplaceAll(p, from, to)
		}
		layout = append(layout, regexp.MustCompile("^"+p+"$"))
	}
	require.GreaterOrEqual(t, len(layout), 10, "pkg/rdb/keys.go's layout")
	keys, err := rc.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		if !slices.ContainsFunc(layout, func(re *regexp.Regexp) bool { return re.MatchString(k) }) {
			t.Errorf("Redis holds %s, which pkg/rdb/keys.go's key layout does not describe", k)
		}
	}
}

// matches reports whether an answer is the documented one: the status,
// and every top-level field the documentation shows by name, with its
// value as shown. A value that differs from run to run is shown as such:
// … (any value: a random amount), a string holding … or ... (an id, a
// token: any string), a time (any time), "message" (any sentence: the
// code is the contract); a nested object or array is not compared.
func matches(doc answer, status int, body string) bool {
	if status != doc.status {
		return false
	}
	var got map[string]any
	if json.Unmarshal([]byte(body), &got) != nil {
		return false
	}
	for key, val := range topLevelFields(doc.body) {
		v, ok := got[key]
		if !ok || !sameValue(key, val, v) {
			return false
		}
	}
	return true
}

// sameValue reports whether got is the value documented as doc (as
// written: a JSON literal, or the start of an object or array).
func sameValue(key, doc string, got any) bool {
	doc = strings.TrimSpace(doc)
	if key == "message" || doc == "…" || doc == "" || doc[0] == '{' || doc[0] == '[' {
		return true
	}
	var want any
	if json.Unmarshal([]byte(doc), &want) != nil {
		return false // not a literal: "...", a placeholder written as prose
	}
	if w, ok := want.(string); ok {
		g, isString := got.(string)
		if !isString {
			return false
		}
		if strings.Contains(w, "…") || strings.Contains(w, "...") {
			return true
		}
		if _, err := time.Parse(time.RFC3339, w); err == nil {
			_, err := time.Parse(time.RFC3339, g)
			return err == nil
		}
		return w == g
	}
	return reflect.DeepEqual(want, got)
}

// topLevelFields reads the fields of a documented answer's outermost
// object ("name": value, as written), skipping nested objects and the
// "..." that stand for the rest.
func topLevelFields(doc string) map[string]string {
	out := map[string]string{}
	field := regexp.MustCompile(`^"([a-z_]+)":\s*("[^"]*"|[^,}\]]*)`)
	depth := 0
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			if depth == 1 {
				if m := field.FindStringSubmatch(doc[i:]); m != nil {
					out[m[1]] = m[2]
					i += len(m[1]) + 2 // past the name; the value is read as the loop goes on
					continue
				}
			}
			if j := strings.IndexByte(doc[i+1:], '"'); j >= 0 { // past a string
				i += j + 1
			}
		}
	}
	return out
}
