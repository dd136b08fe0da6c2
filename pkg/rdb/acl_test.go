package rdb_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/split"
)

// Each role's ACL user can do its work and nothing else: not another
// role's commands, no admin command, no key outside flashsale's.
func TestACLUsersAreRestricted(t *testing.T) {
	srv := testsrv.NewRedis(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := context.Background()
	as := func(role string) *redis.Client {
		rules, err := rdb.ACLRules(role)
		require.NoError(t, err)
		args := []any{"ACL", "SETUSER", "u_" + role, rules[0], ">pw"}
		for _, r := range rules[1:] {
			args = append(args, r)
		}
		require.NoError(t, admin.Do(ctx, args...).Err())
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "u_" + role, Password: "pw"})
		t.Cleanup(func() { c.Close() })
		return c
	}
	noperm := func(err error) {
		t.Helper()
		require.Error(t, err)
		require.Contains(t, err.Error(), "NOPERM")
	}
	gw := as("gateway")
	s, err := rdb.New(gw, 1, "")
	require.NoError(t, err)
	require.NoError(t, s.Load(ctx))
	require.NoError(t, s.EnsureGroups(ctx))
	require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: 1, Stock: 2, PerUserLimit: 1}))
	_, err = claim(s, 1, "alice", t0)
	require.NoError(t, err, "the gateway admits")
	created, err := s.CreateVoucher(ctx, rdb.Voucher{ID: 2, Stock: 2, PerUserLimit: 1, Buckets: 1}, []int64{7})
	require.NoError(t, err, "the gateway creates a voucher (once)")
	require.True(t, created)
	yes := true
	_, found, err := s.ApplyChange(ctx, rdb.Change{ID: 8, VoucherID: 2, Paused: &yes})
	require.NoError(t, err, "the gateway applies an operator's change")
	require.True(t, found)
	rp, err := rdb.New(as("reaper"), 1, "")
	require.NoError(t, err)
	created, err = rp.CreateVoucher(ctx, rdb.Voucher{ID: 2, Stock: 2, PerUserLimit: 1, Buckets: 1}, nil)
	require.NoError(t, err, "the reaper finishes a creation")
	require.False(t, created, "there already")
	_, err = s.RoomIndex(ctx, nil)
	require.NoError(t, err, "the gateway reads the rooms' index")
	unindexed, err := rp.UnindexedRooms(ctx)
	require.NoError(t, err, "the reaper reads the index's mark")
	require.NoError(t, rp.IndexRooms(ctx, unindexed, []int64{1, 2}), "and completes the index")
	noperm(gw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: rdb.DefaultGroup, Consumer: "x", Streams: []string{rdb.StreamKey(0), ">"}}).Err())
	noperm(gw.FlushAll(ctx).Err())
	noperm(gw.Get(ctx, "other:key").Err())
	noperm(gw.Keys(ctx, "*").Err())

	w := as("worker")
	entries, err := rdb.New(w, 1, "")
	require.NoError(t, err)
	got, err := entries.ReadGroup(ctx, 0, "w1", ">", 10, 0)
	require.NoError(t, err, "the worker reads")
	require.Len(t, got, 1)
	noperm(w.HSet(ctx, "flashsale:{p0}:v:1", "stock", 100).Err())
	noperm(w.ConfigGet(ctx, "*").Err())

	m := as("metrics")
	require.NoError(t, m.XLen(ctx, rdb.StreamKey(0)).Err())
	noperm(m.XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), Values: []any{"a", "b"}}).Err())
	noperm(m.Del(ctx, rdb.StreamKey(0)).Err())

	// A split, under claims: the reaper's commands, and the gateway's
	// while the voucher pre-copies (admit.lua names its moving users).
	require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: 3, Stock: 100, PerUserLimit: 1}))
	var claimed int
	splitter := split.New(rp).BeforeStep(func(step string) error {
		if step == "copy" { // pre-copying: every claim is decided
			for i := range 16 {
				if _, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(3, fmt.Sprintf("buyer-%d", i), "k")); err != nil {
					return err
				}
				claimed++
			}
		}
		return nil
	})
	_, err = splitter.Split(ctx, 3, 4)
	require.NoError(t, err, "the reaper splits, the gateway admits meanwhile")
	require.Equal(t, 16, claimed)

	_, err = rdb.ACLRules("nobody")
	require.Error(t, err)
}
