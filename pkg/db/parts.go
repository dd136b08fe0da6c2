package db

// A sink relayed in parts (sql/0022_event_relayers.sql): each part has a
// row of event_sinks of its own, "SINK#i/N", with its own place and
// lease, and holds the events of its orders (event.PartOf). The reapers
// relaying the sink say so in event_relayers, and share the parts
// evenly, each keeping the parts it holds (ownsPart): each relays about
// N/R of them, adding a reaper adds a relay, and a reaper that comes or
// goes moves only the parts it takes or leaves.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// PartName is the event_sinks row of part i (from 0) of sink relayed in
// parts parts: the sink's name when parts is 1, else "sink#i+1/parts".
func PartName(sink string, i, parts int) string {
	if parts <= 1 {
		return sink
	}
	return sink + "#" + strconv.Itoa(i+1) + "/" + strconv.Itoa(parts)
}

// SinkOfRow is the sink event_sinks row name belongs to: name less a
// part's "#i/N".
func SinkOfRow(name string) string {
	k := strings.LastIndexByte(name, '#')
	if k < 0 {
		return name
	}
	i, n, ok := strings.Cut(name[k+1:], "/")
	if _, err := strconv.Atoi(i); err != nil || !ok {
		return name
	}
	if _, err := strconv.Atoi(n); err != nil {
		return name
	}
	return name[:k]
}

// sinkRows is the condition on event_sinks.name of every row of a sink
// (its own, its parts'), with its three arguments: names from "sink#" to
// "sink$" hold the parts ('#' and '$' are next to each other in the
// binary collation), an index range.
const sinkRows = "(name = ? OR (name >= CONCAT(?, '#') AND name < CONCAT(?, '$')))"

func sinkArgs(sink string) []any { return []any{sink, sink, sink} }

// sinkColumns are an event_sinks row's columns as SinkState reads them;
// sinkLive is whether its lease is held (by MySQL's clock).
const (
	sinkColumns = "name, delivered_upto, owner, lease_until, failing_since, attempts, last_error, disabled, seen_at"
	sinkLive    = "(owner IS NOT NULL AND lease_until >= UTC_TIMESTAMP(3)) AS live"
)

// PartHold is what HoldPart found.
type PartHold struct {
	// State is the part's row as read (before the hold).
	State SinkState
	// Held: the caller holds the part's lease until now + ttl.
	Held bool
	// Assigned: the part is the caller's among the reapers relaying;
	// Held and not Assigned: another reaper came or went, and the caller
	// hands the part over (finishes what it read, then ReleaseSink).
	Assigned bool
	// Waiting: the sink's rows are of another number of parts, and this
	// reaper holds one of them: nothing is relayed in the new parts until
	// its lease ends (a reaper with another FLASHSALE_EVENTS_RELAY_PARTS).
	Waiting string
	// Relayers: the live reapers relaying the sink in as many parts.
	Relayers int
}

// HoldPart takes, or renews, owner's lease on part of sink (relayed in
// parts parts) when the part is owner's among the live reapers
// relaying the sink, or when owner holds it still; with renew, owner
// stays a live relayer for ttl (a relay renews it a few times a lease,
// not at each look). Rows of another number of parts, held by no live
// lease, become this number's, each starting at the lowest place of
// the old (their events after it are sent again: at least once); a new
// sink's parts start at the last sequence given.
func (s *Store) HoldPart(ctx context.Context, sink string, part, parts int, owner string, ttl time.Duration, renew bool) (PartHold, error) {
	var h PartHold
	name := PartName(sink, part, parts)
	err := retryDeadlock(func() error {
		h = PartHold{}
		return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if renew {
				if err := tx.Exec(`INSERT INTO event_relayers (sink, owner, parts, seen_until) VALUES (?, ?, ?, UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND)
				ON DUPLICATE KEY UPDATE parts = VALUES(parts), seen_until = VALUES(seen_until)`, sink, owner, parts, ttl.Microseconds()).Error; err != nil {
					return fmt.Errorf("record the relayer of %s: %w", sink, err)
				}
			}
			var relayers []string
			if err := tx.Raw(`SELECT owner FROM event_relayers WHERE sink = ? AND parts = ? AND seen_until >= UTC_TIMESTAMP(3) ORDER BY owner`,
				sink, parts).Scan(&relayers).Error; err != nil {
				return fmt.Errorf("read the relayers of %s: %w", sink, err)
			}
			var rows []struct {
				SinkState
				Live bool
			}
			if err := tx.Raw(`SELECT `+sinkColumns+`, `+sinkLive+`
				FROM event_sinks WHERE `+sinkRows+` ORDER BY name FOR UPDATE`, sinkArgs(sink)...).Scan(&rows).Error; err != nil {
				return fmt.Errorf("read sink %s: %w", sink, err)
			}
			want := make([]string, parts)
			for i := range want {
				want[i] = PartName(sink, i, parts)
			}
			var mine *SinkState
			mineLive := false
			var others []string
			from, disabled := int64(-1), ""
			for i := range rows {
				r := &rows[i]
				if from < 0 || r.DeliveredUpto < from {
					from = r.DeliveredUpto
				}
				disabled = max(disabled, r.Disabled)
				if r.Name == name {
					mine, mineLive = &r.SinkState, r.Live
				}
				if !slices.Contains(want, r.Name) {
					if r.Live && r.Owner != owner {
						h.Waiting = r.Owner
						return nil
					}
					others = append(others, r.Name)
				}
			}
			if mine == nil || len(others) > 0 || len(rows)-len(others) < parts {
				if len(rows) == 0 { // a new sink: the events to come
					if err := tx.Raw("SELECT last FROM event_sequence WHERE id = 1").Scan(&from).Error; err != nil {
						return err
					}
				}
				if len(others) > 0 {
					if err := tx.Exec("DELETE FROM event_sinks WHERE name IN ?", others).Error; err != nil {
						return fmt.Errorf("part sink %s: %w", sink, err)
					}
				}
				for _, w := range want {
					if err := tx.Exec(`INSERT IGNORE INTO event_sinks (name, delivered_upto, disabled, seen_at) VALUES (?, ?, ?, UTC_TIMESTAMP(3))`,
						w, from, disabled).Error; err != nil {
						return fmt.Errorf("part sink %s: %w", sink, err)
					}
				}
				if mine == nil { // inserted now, or by another reaper just before
					var st struct {
						SinkState
						Live bool
					}
					if err := tx.Raw(`SELECT `+sinkColumns+`, `+sinkLive+` FROM event_sinks WHERE name = ? FOR UPDATE`, name).
						Scan(&st).Error; err != nil {
						return err
					}
					mine, mineLive = &st.SinkState, st.Live
				}
			}
			h.State, h.Relayers = *mine, len(relayers)
			holders := make([]string, parts) // each part's live holder, "" none
			for _, r := range rows {
				if i := slices.Index(want, r.Name); i >= 0 && r.Live {
					holders[i] = r.Owner
				}
			}
			h.Assigned = ownsPart(relayers, holders, part, owner)
			holds := mine.Owner == owner && mineLive
			free := mine.Owner == "" || mine.Owner == owner || !mineLive
			if !(h.Assigned && free) && !holds {
				return nil
			}
			h.Held = true
			h.State.Owner = owner
			return tx.Exec(`UPDATE event_sinks SET owner = ?, lease_until = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, seen_at = UTC_TIMESTAMP(3)
			WHERE name = ?`, owner, ttl.Microseconds(), name).Error
		}, readCommitted)
	})
	return h, err
}

// ownsPart says whether part is owner's share of a sink's parts among
// the live relayers (sorted), given each part's live holder (holders, by
// part; "" none). A part stays with the live relayer holding it unless
// that one holds more than its share (then it gives up its highest part
// first, one at a time); a part held by none goes to the relayer holding
// fewest (the first by token of those). So a reaper that comes or goes
// moves only the parts it takes or leaves, not the others': a part moved
// between live reapers may send again what its old holder had delivered
// past its place.
func ownsPart(relayers, holders []string, part int, owner string) bool {
	if len(relayers) == 0 {
		return false
	}
	count := map[string]int{}
	for _, h := range holders {
		if slices.Contains(relayers, h) {
			count[h]++
		}
	}
	n, r := len(holders), len(relayers)
	least, most := n/r, (n+r-1)/r
	short := false // a relayer holds less than the least share
	for _, x := range relayers {
		short = short || count[x] < least
	}
	switch holders[part] {
	case owner:
		if !slices.Contains(relayers, owner) {
			return false
		}
		if c := count[owner]; c > most || (c > least && short) {
			for i := n - 1; i >= 0; i-- {
				if holders[i] == owner {
					return i != part // its highest part is given up
				}
			}
		}
		return true
	case "":
		neediest := relayers[0]
		for _, x := range relayers[1:] {
			if count[x] < count[neediest] {
				neediest = x
			}
		}
		return neediest == owner
	}
	return false // held by another reaper
}

// LeaveRelay says owner relays sink no more (a reaper stopping): the
// others take its parts as soon as its leases are given up.
func (s *Store) LeaveRelay(ctx context.Context, sink, owner string) error {
	db := s.db.WithContext(ctx)
	if err := db.Exec("DELETE FROM event_relayers WHERE sink = ? AND owner = ?", sink, owner).Error; err != nil {
		return err
	}
	// The relayers gone for a day are forgotten.
	return db.Exec("DELETE FROM event_relayers WHERE sink = ? AND seen_until < UTC_TIMESTAMP(3) - INTERVAL 1 DAY", sink).Error
}
