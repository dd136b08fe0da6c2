package testsrv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A port found free may be taken by another test process's server before
// this one binds it: the server started on it then exits, and the other
// answers its address. Its start must fail (onPort then tries another
// port), not hand the caller the other's server. (A stack that ran on
// another test's Redis saw its 202s become nobody's orders, on a loaded
// machine, now and then.)
func TestARedisStartedOnATakenPortIsNotTheOneAnswering(t *testing.T) {
	a, err := StartRedis(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Kill() })
	_, port, err := net.SplitHostPort(a.Addr)
	require.NoError(t, err)

	dir := t.TempDir()
	b := &Redis{Addr: a.Addr, srv: server{name: "redis-server", bin: a.srv.bin, logPath: filepath.Join(dir, "redis.log"),
		args: []string{"--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""}}}
	b.srv.ready = b.ping
	err = b.srv.start()
	require.Error(t, err, "b's server cannot bind a's port: its start must not succeed on a's answers")
	require.True(t, strings.Contains(err.Error(), "exited during start-up") || strings.Contains(err.Error(), "another process"), err.Error())
}

// ListensOn tells this process's listener from another's.
func TestListensOnTellsWhoseListenerItIs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	mine, err := ListensOn(os.Getpid(), port)
	require.NoError(t, err)
	require.True(t, mine)
	a, err := StartRedis(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Kill() })
	_, rp, err := net.SplitHostPort(a.Addr)
	require.NoError(t, err)
	redisPort, _ := strconv.Atoi(rp)
	mine, err = ListensOn(os.Getpid(), redisPort)
	require.NoError(t, err)
	require.False(t, mine, "redis-server's port is not this process's")
	theirs, err := ListensOn(a.srv.cmd.Process.Pid, redisPort)
	require.NoError(t, err)
	require.True(t, theirs)
}
