package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
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

	cmd := exec.Command(bin, "-serve", "-workers", "1", "-stock", "10", "-port", "0") // 8080 may be another run's
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
	for !strings.Contains(printed.String(), "bin/reaper report") {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the demo ended before it was up:\n%s", printed.String())
			printed.WriteString(l + "\n")
		case <-deadline:
			t.Fatalf("not up within 3 minutes:\n%s", printed.String())
		}
	}
	text := printed.String()
	// The export block and the commands after it, pasted into a shell as
	// printed.
	var exports, claim, events string
	for _, l := range strings.Split(text, "\n") {
		l, _, _ = strings.Cut(l, "  #") // the comment after a command
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "export "):
			exports += l + "\n"
		case strings.HasPrefix(l, "curl -X POST"):
			claim = l
		case strings.HasPrefix(l, "curl ") && strings.Contains(l, "/admin/v1/events"):
			events = l
		}
	}
	for _, v := range []string{"GATEWAY", "ADMIN", "TOKEN", "FLASHSALE_ADMIN_TOKEN", "FLASHSALE_JWT_SECRET", "FLASHSALE_REDIS_ADDR", "FLASHSALE_MYSQL_DSN"} {
		require.Contains(t, exports, "export "+v+"=", text)
	}
	paste := func(command string) string {
		out, err := exec.Command("bash", "-c", exports+command+" -s -w ' %{http_code}'").Output()
		require.NoError(t, err, "%s", command)
		t.Logf("%s\n-> %s", command, out)
		return string(out)
	}
	require.True(t, strings.HasSuffix(paste(claim), " 202"), "the printed claim is admitted")
	testenv.Eventually(t, time.Minute, "the claim's order.created in the events API", func() bool {
		return strings.Contains(paste(events), `"type":"order.created"`)
	})

	console := regexp.MustCompile(`console\s+(\S+)#token=(\S+)`).FindStringSubmatch(text)
	require.NotNil(t, console, text)
	res, err := http.Get(console[1])
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

// make demo with a sink set runs the reaper, relays the sale's events to
// it and says how many it delivered: every event published.
func TestTheDemoSaysWhatTheSinkDelivered(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	hook := testsink.NewReceiver(t)
	cmd := exec.Command("go", "run", ".", "-stock", "50", "-users", "200", "-requests", "400", "-concurrency", "16")
	cmd.Env = append(os.Environ(), "FLASHSALE_EVENTS_WEBHOOK_URLS="+hook.URL, "FLASHSALE_EVENTS_WEBHOOK_SECRET="+testsink.Secret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`events: (\d+) published`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	sink, err := event.WebhookName(hook.URL)
	require.NoError(t, err)
	require.Contains(t, string(out), sink+" delivered "+string(m[1])+", failed 0", "%s", out)
	require.Equal(t, string(m[1]), strconv.Itoa(hook.Delivered()))
	require.Empty(t, hook.Unverified())
}
