// Command scriptcost counts the instructions redis-server runs per
// admission (admit.lua, the call's network reads and writes, the stream
// entry), under valgrind's callgrind: a count, not a time, so it is the
// same on a busy machine or a quiet one, and two trees compare by it
// (BENCHMARKS.md, "The admission script's instructions").
//
//	go run ./pkg/internal/cmd/scriptcost [-per 1,8,32] [-n 4000]
//
// It starts redis-server under callgrind on a free port, puts a voucher
// on sale, admits 200 claims to warm it, zeroes the counters, admits -n
// claims in calls of -per (each a new user, sent as the gateway sends
// them: an unkeyed claim with its serial and horizon), and reads the
// total. Needs valgrind (apt-get install -y valgrind).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

func main() {
	pers := flag.String("per", "1,8,32", "claims a call, comma-separated")
	n := flag.Int("n", 4000, "claims counted at each size")
	bare := flag.Bool("bare", false, "claims without a serial and a horizon (as a caller other than the gateway sends them)")
	flag.Parse()
	if _, err := exec.LookPath("valgrind"); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost needs valgrind: apt-get install -y valgrind")
		os.Exit(1)
	}
	for _, f := range strings.Split(*pers, ",") {
		per, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || per < 1 {
			fmt.Fprintf(os.Stderr, "-per: %q is not a size\n", f)
			os.Exit(2)
		}
		ir, err := count(per, *n, *bare)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scriptcost:", err)
			os.Exit(1)
		}
		fmt.Printf("calls of %d: %d instructions an admission (%d admissions)\n", per, ir/int64(*n), *n)
	}
}

// count is what redis-server ran, in instructions, for n admissions in
// calls of per.
func count(per, n int, bare bool) (int64, error) {
	bin, err := testsrv.LookPath("redis-server")
	if err != nil {
		return 0, err
	}
	port, err := testsrv.FreePort()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "scriptcost")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	srv := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), ReadTimeout: time.Minute})
	defer c.Close()
	for deadline := time.Now().Add(time.Minute); c.Ping(ctx).Err() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("redis-server under valgrind did not answer in a minute")
		}
	}
	s, err := rdb.New(c, 1, "")
	if err != nil {
		return 0, err
	}
	for _, step := range []func(context.Context) error{s.Load, s.EnsureGroups, s.MarkAllLoaded} {
		if err := step(ctx); err != nil {
			return 0, err
		}
	}
	if err := s.PutVoucher(ctx, rdb.Voucher{ID: 1, Stock: 1 << 40, PerUserLimit: 1}); err != nil {
		return 0, err
	}
	now := time.Now()
	day, horizon := order.Day(now, time.UTC), admission.HorizonAfter(now, time.Hour)
	user := 0
	adm := admission.New(s, nil)
	call := func(k int) error {
		claims := make([]admission.Claim, k)
		for i := range claims {
			claims[i] = admission.Claim{VoucherID: 1, UserID: "u" + strconv.Itoa(user), Now: now, Day: day}
			if !bare {
				claims[i].Serial, claims[i].Horizon = admission.NewSerial(), horizon
			}
			user++
		}
		_, errs, err := adm.AdmitMany(ctx, claims)
		if err == nil {
			err = errs[0]
		}
		return err
	}
	for range 200 {
		if err := call(1); err != nil {
			return 0, err
		}
	}
	pid := strconv.Itoa(srv.Process.Pid)
	if err := control("-z", pid); err != nil {
		return 0, err
	}
	for done := 0; done < n; done += per {
		if err := call(min(per, n-done)); err != nil {
			return 0, err
		}
	}
	if err := control("-d", pid); err != nil {
		return 0, err
	}
	return totals(dir)
}

// control runs callgrind_control with arg on pid.
func control(arg, pid string) error {
	if out, err := exec.Command("callgrind_control", arg, pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %v: %s", arg, err, out)
	}
	return nil
}

// totals is the instruction count of the dump callgrind_control -d wrote
// in dir (the newest besides the final one), waiting for it a while.
func totals(dir string) (int64, error) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		dumps, _ := filepath.Glob(filepath.Join(dir, "callgrind.out.*"))
		for _, d := range dumps {
			if ir, ok := summary(d); ok {
				return ir, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no callgrind dump in %s", dir)
		}
	}
}

// summary reads a callgrind dump's total ("summary:" or "totals:").
func summary(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, p := range []string{"summary:", "totals:"} {
			if rest, ok := strings.CutPrefix(sc.Text(), p); ok {
				ir, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
				return ir, err == nil
			}
		}
	}
	return 0, false
}
