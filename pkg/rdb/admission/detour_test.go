package admission_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// holdRefills holds each refill of a dry bucket by adm, before its read,
// until release is called (also at the test's end, so that nothing is
// left waiting); entered receives one value a refill, refills counts them.
func holdRefills(t *testing.T, adm *admission.Admitter) (refills *atomic.Int64, entered <-chan struct{}, release func()) {
	refills = new(atomic.Int64)
	in, held := make(chan struct{}, 64), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	adm.OnRefill(func() {
		refills.Add(1)
		in <- struct{}{}
		<-held
	})
	return refills, in, release
}

// A hot voucher's sold-out tail holds up no other claim: a claim whose
// bucket is dry is decided again off the batcher's pipelines, so claims
// of another voucher are answered while its refill is under way (the
// soak saw a two-bucket voucher's tail time out claims of four others
// for minutes). And the voucher's refills are one at a time: the claims
// that found it dry while one was under way are answered from its read.
func TestAHotVouchersDryTailHoldsUpNoOtherClaim(t *testing.T) {
	s := newStore(t, 8)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 7, Stock: 2, PerUserLimit: 1, Buckets: 2})
	seedVoucher(t, s, rdb.Voucher{ID: 8, Stock: 100, PerUserLimit: 1})
	home1 := usersIn(1, 2, 40)
	_, err := claim(s, 7, home1[0], t0) // bucket 1's unit: bucket 1 is dry, bucket 0 holds one
	require.NoError(t, err)

	adm := testrdb.Admitter(s)
	b := adm.NewBatcher(1, 32, 30*time.Second) // one pipeline: a refill on it would hold every other claim
	t.Cleanup(b.Close)
	admit := func(v int64, user string) (admission.Admission, error) {
		return b.Admit(ctx, admission.Claim{VoucherID: v, UserID: user, Now: t0, Day: order.Day(t0, time.UTC)})
	}
	refills, entered, release := holdRefills(t, adm)
	dry := make(chan error, 1)
	go func() { _, err := admit(7, home1[1]); dry <- err }()
	<-entered // its refill is held
	other := make(chan error, 1)
	go func() { _, err := admit(8, "someone-else"); other <- err }()
	select {
	case err := <-other:
		require.NoError(t, err, "another voucher's claim, answered while the refill is held")
	case <-time.After(20 * time.Second):
		t.Fatal("another voucher's claim waited for a hot voucher's refill")
	}
	release()
	require.NoError(t, <-dry, "the dry claim admitted from bucket 0's unit")
	requireStock(t, s, 7, 0)

	// Sold out everywhere: one refill reads it, the claims that found
	// their bucket dry meanwhile are answered from that read.
	refills, entered, release = holdRefills(t, adm)
	first := make(chan error, 1)
	go func() { _, err := admit(7, home1[2]); first <- err }()
	<-entered
	const waiting = 20
	answers := make(chan error, waiting)
	for _, u := range home1[3 : 3+waiting] {
		go func() { _, err := admit(7, u); answers <- err }()
	}
	require.NoError(t, wait.Until(context.Background(), 20*time.Second, "the claims finding their bucket dry", func() (bool, string) {
		n := adm.DryWaiting(7)
		return n >= waiting, fmt.Sprintf("%d wait", n)
	}))
	release()
	require.ErrorIs(t, <-first, rdb.ErrSoldOut)
	for range waiting {
		require.ErrorIs(t, <-answers, rdb.ErrSoldOut)
	}
	require.EqualValues(t, 1, refills.Load(), "one refill read the voucher sold out for all")
}

// The claims that found a bucket dry while its refill was under way run
// again once it has brought units, each at once: not one after another,
// each with a refill of its own. A split leaves its new buckets dry until
// they are given units, and the bench's split row saw the claims that
// found them so wait their turns for 11.6 s.
func TestClaimsThatFoundABucketDryShareItsRefill(t *testing.T) {
	s := newStore(t, 8)
	ctx := context.Background()
	const v = 7
	seedVoucher(t, s, rdb.Voucher{ID: v, Stock: 100, PerUserLimit: 1, Buckets: 2})
	home1 := usersIn(1, 2, 50+21)
	for _, u := range home1[:50] { // bucket 1's units: it is dry, bucket 0 holds 50
		_, err := claim(s, v, u, t0)
		require.NoError(t, err)
	}
	adm := testrdb.Admitter(s)
	refills, entered, release := holdRefills(t, adm)
	b := adm.NewBatcher(2, 32, 30*time.Second)
	t.Cleanup(b.Close)
	admit := func(user string) error {
		_, err := b.Admit(ctx, admission.Claim{VoucherID: v, UserID: user, Now: t0, Day: order.Day(t0, time.UTC)})
		return err
	}
	first := make(chan error, 1)
	go func() { first <- admit(home1[50]) }()
	<-entered // its refill is held
	const waiting = 20
	answers := make(chan error, waiting)
	for _, u := range home1[51:] {
		go func() { answers <- admit(u) }()
	}
	require.NoError(t, wait.Until(context.Background(), 20*time.Second, "the claims finding their bucket dry", func() (bool, string) {
		n := adm.DryWaiting(v)
		return n >= waiting, fmt.Sprintf("%d wait", n)
	}))
	release()
	require.NoError(t, <-first)
	for range waiting {
		require.NoError(t, <-answers, "admitted from the units the first refill brought (half of bucket 0's 50)")
	}
	require.EqualValues(t, 1, refills.Load(), "one refill brought the units of all")
	requireStock(t, s, v, 100-50-1-waiting)
}
