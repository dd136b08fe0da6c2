package cli

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
)

// Two reapers started alike on one host get two names: the default is
// unique per process (and per start), beginning reaper-<host>-.
func TestTheDefaultReaperNameIsUniquePerProcess(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	var a, b config
	if err := consumerName(&a); err != nil {
		t.Fatal(err)
	}
	if err := consumerName(&b); err != nil {
		t.Fatal(err)
	}
	if a.Consumer == b.Consumer {
		t.Fatalf("two reapers both named %s", a.Consumer)
	}
	for _, n := range []string{a.Consumer, b.Consumer} {
		if !strings.HasPrefix(n, "reaper-"+host+"-") {
			t.Errorf("default name %q does not begin reaper-%s-", n, host)
		}
	}
	named := config{}
	named.Consumer = "given"
	if err := consumerName(&named); err != nil || named.Consumer != "given" {
		t.Errorf("FLASHSALE_CONSUMER_NAME=given became %q (%v)", named.Consumer, err)
	}
}

// The tail's line names what an event is about: an order, or a split
// voucher.
func TestTheTailsLineNamesTheEventsSubject(t *testing.T) {
	at := time.Now()
	order := db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 12, VoucherID: 3, UserID: "alice", Status: "cancelled", Reason: "payment_expired"}, Sequence: 5, OccurredAt: at}
	split := db.OutboxEvent{Snapshot: db.Snapshot{VoucherID: 3, Split: &db.Split{Buckets: 4, At: at}}, Sequence: 6, OccurredAt: at}
	line := eventLine(event.Of("s", order), order)
	require.Contains(t, line, "order.cancelled")
	require.Contains(t, line, "order 12  voucher 3  user alice  (payment_expired)")
	line = eventLine(event.Of("s", split), split)
	require.Contains(t, line, "voucher.split")
	require.Contains(t, line, "voucher 3  to 4 buckets")
	require.NotContains(t, line, "order")
}

// A count that is not one is named as what it is: negative, zero, or not
// a whole number.
func TestACountSaysWhatItIsInstead(t *testing.T) {
	for arg, want := range map[string]string{
		"-5":  `UNITS must be a whole number of 1 or more: -5 is negative`,
		"0":   `UNITS must be a whole number of 1 or more, not 0`,
		"abc": `UNITS must be a whole number of 1 or more: "abc" is not a whole number`,
		"2.5": `UNITS must be a whole number of 1 or more: "2.5" is not a whole number`,
	} {
		_, err := wholeNumber("UNITS", arg)
		require.EqualError(t, err, want)
	}
	n, err := wholeNumber("UNITS", "12")
	require.NoError(t, err)
	require.EqualValues(t, 12, n)
}

// A redelivery says what the sink missed: with every event after
// --after deleted past the retention, that they are gone and where the
// next begins, never only that it gets the events to come.
func TestARedeliverySaysWhatTheSinkMissed(t *testing.T) {
	for _, tc := range []struct {
		after, first, last int64
		want               string
	}{
		{1, 0, 25424, "kafka: the events 2 to 25424 were deleted past FLASHSALE_EVENTS_RETENTION and none is kept: it missed them, and gets the events to come, from 25425"},
		{25424, 0, 25424, "kafka: nothing published after 25424 yet: it gets the events to come"},
		{1, 100, 120, "kafka: sending the events 100 to 120; those after 1 and before 100 were deleted past FLASHSALE_EVENTS_RETENTION"},
		// After a 410, or to a sink added later: some were never sent, so
		// not "again".
		{99, 100, 120, "kafka: sending the events 100 to 120"},
	} {
		require.Equal(t, tc.want, redelivering("kafka", tc.after, tc.first, tc.last))
	}

}
