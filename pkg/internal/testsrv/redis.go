package testsrv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a throwaway redis-server.
type Redis struct {
	// Addr is host:port of the server.
	Addr string
	srv  server
}

// StartRedis starts redis-server with its data in dir (created if missing).
// extra are additional configuration arguments, e.g. "--appendonly", "yes".
// By default nothing is persisted.
func StartRedis(dir string, extra ...string) (*Redis, error) {
	return startRedis(nil, dir, extra...)
}

// StartRedisIn starts redis-server as StartRedis does, inside network
// namespace n, listening on n's address: n.Cut partitions it from
// everything outside.
func StartRedisIn(n *Netns, dir string, extra ...string) (*Redis, error) {
	return startRedis(n, dir, extra...)
}

func startRedis(n *Netns, dir string, extra ...string) (*Redis, error) {
	bin, err := LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &Redis{srv: server{name: "redis-server", bin: bin, logPath: filepath.Join(dir, "redis.log")}}
	r.srv.ready = r.ping
	host := "127.0.0.1"
	if n != nil {
		host, r.srv.bin = n.IP, n.ipPath
	}
	err = onPort(&r.srv, func(port int) {
		r.Addr = net.JoinHostPort(host, itoa(port))
		r.srv.args = append([]string{
			"--port", itoa(port), "--bind", host, "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--logfile", "",
		}, extra...)
		if n != nil {
			// Clients come from outside the namespace, not from loopback.
			r.srv.args = n.wrap(bin, append(r.srv.args, "--protected-mode", "no"))
		}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Redis) ping() error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	return r.srv.answersItself(c)
}

// answersItself reports whether the server answering c is this one's
// process: a port found free a moment ago may be taken by another test
// process's server meanwhile (go test runs packages' tests in processes
// of their own), and then this one fails to bind it and exits while
// the other answers its address: a stack that ran on another's Redis
// saw its 202s become nobody's orders.
func (s *server) answersItself(c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			if v != strconv.Itoa(s.cmd.Process.Pid) {
				return fmt.Errorf("%s: another process (pid %s) answers on its port", s.name, v)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: INFO server names no process_id", s.name)
}

// Client returns a new go-redis client for the server.
func (r *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr})
}

// Start starts the server again after Stop or Kill, on the same port and data.
func (r *Redis) Start() error { return r.srv.start() }

// Stop shuts the server down cleanly.
func (r *Redis) Stop() error { return r.srv.stop() }

// Kill kills the server with SIGKILL.
func (r *Redis) Kill() error { return r.srv.kill() }

// Pause freezes redis-server (SIGSTOP): connections stay open, nothing answers.
func (r *Redis) Pause() error { return r.srv.pause() }

// Resume lets a paused redis-server go on.
func (r *Redis) Resume() error { return r.srv.resume() }
