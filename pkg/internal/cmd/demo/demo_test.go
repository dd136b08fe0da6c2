package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// make dev comes up: servers, roles and console keep running, and what it
// prints works as printed (the curl claims, the console opens); Ctrl-C
// stops it cleanly.
func TestDevStackComesUpAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd := exec.Command(bin, "-serve", "-workers", "1", "-stock", "10")
	cmd.Env = os.Environ()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var printed strings.Builder
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(printed.String(), "try:") {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the demo ended before it was up:\n%s", printed.String())
			printed.WriteString(l + "\n")
		case <-deadline:
			t.Fatalf("not up within 3 minutes:\n%s", printed.String())
		}
	}
	text := printed.String()
	m := regexp.MustCompile(`curl -X POST -H "Authorization: Bearer (\S+)" (\S+)`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	req, err := http.NewRequest("POST", m[2], nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m[1])
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusAccepted, res.StatusCode, "the printed curl claims: %s", body)

	console := regexp.MustCompile(`console\s+(\S+)#token=(\S+)`).FindStringSubmatch(text)
	require.NotNil(t, console, text)
	res, err = http.Get(console[1])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() {
		for range lines { // drain
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "Ctrl-C stops it cleanly")
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after Ctrl-C")
	}
}
