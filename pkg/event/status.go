package event

import (
	"time"

	"github.com/flashsale/flashsale/pkg/db"
)

// SinkStatus is where a sink stands, as "reaper events --json", GET
// /admin/v1/events/sinks and the console show it.
type SinkStatus struct {
	Name          string `json:"name"`
	DeliveredUpTo int64  `json:"delivered_up_to"`
	// Undelivered: the events published after DeliveredUpTo; the oldest
	// of them written at OldestUndelivered.
	Undelivered       int64      `json:"undelivered"`
	OldestUndelivered *time.Time `json:"oldest_undelivered,omitempty"`
	// Failed: events recorded failed for the endpoint.
	Failed int64 `json:"failed"`
	// Retrying: the last error of the event being retried, and attempts.
	Retrying string `json:"retrying,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	// Stopped: why the endpoint takes nothing more (410 Gone).
	Stopped string `json:"stopped,omitempty"`
	// RelayedBy: the reaper holding the sink's lease ("" none now).
	RelayedBy string `json:"relayed_by,omitempty"`
}

// StatusOf is st as shown, last the last sequence published.
func StatusOf(st db.SinkState, last int64, now time.Time) SinkStatus {
	s := SinkStatus{Name: st.Name, DeliveredUpTo: st.DeliveredUpto, Undelivered: max(last-st.DeliveredUpto, 0),
		OldestUndelivered: st.Oldest, Failed: st.Failed, Stopped: st.Disabled}
	if st.FailingSince != nil {
		s.Retrying, s.Attempts = st.LastError, st.Attempts
	}
	if st.LeaseUntil != nil && st.LeaseUntil.After(now) {
		s.RelayedBy = st.Owner
	}
	return s
}
