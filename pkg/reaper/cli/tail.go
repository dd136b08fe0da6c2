package cli

// reaper events tail: the order events as they are published, for a
// person watching a sale in dev or an operator following one voucher.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
)

// tailPoll is how often tail looks for new events when it has caught up.
const tailPoll = 200 * time.Millisecond

func tailCommand() app.Command[*config] {
	var after, voucherID int64
	var asJSON bool
	return app.Command[*config]{Name: "tail", NArgs: 0,
		Summary: "print each order event as it is published, until Ctrl-C",
		Flags: func(fs *flag.FlagSet) {
			fs.Int64Var(&after, "after", -1, "start after `SEQUENCE` (0: every event kept); default: the last published")
			fs.Int64Var(&voucherID, "voucher", 0, "only the events of voucher `ID`")
			fs.BoolVar(&asJSON, "json", false, "print each event as the events API answers it, one a line")
		},
		Run: func(ctx context.Context, cfg *config, _ *app.Runtime, _ []string) error {
			if voucherID < 0 {
				return errors.New("--voucher must be a voucher's id")
			}
			mysql, err := cfg.MySQL(ctx)
			if err != nil {
				return err
			}
			defer mysql.Close() //nolint:errcheck
			err = tail(ctx, mysql, os.Stdout, cfg.EventsConfig.Source, after, voucherID, asJSON)
			if errors.Is(err, context.Canceled) { // Ctrl-C: done
				return nil
			}
			return err
		}}
}

// tail prints the events after after (-1: the last published) of voucher
// voucherID (0: every voucher) to w as they are published, through the
// events API's reader, until ctx ends.
func tail(ctx context.Context, mysql *db.Store, w io.Writer, source string, after, voucherID int64, asJSON bool) error {
	if after < 0 {
		last, err := mysql.LastSequence(ctx)
		if err != nil {
			return err
		}
		after = last
	}
	enc := json.NewEncoder(w)
	for {
		rows, err := mysql.Events(ctx, after, 1000)
		if err != nil {
			return err
		}
		for _, e := range rows {
			after = e.Sequence
			if voucherID != 0 && e.VoucherID != voucherID {
				continue
			}
			ev := event.Of(source, e)
			if asJSON {
				err = enc.Encode(ev)
			} else {
				_, err = fmt.Fprintln(w, eventLine(ev, e))
			}
			if err != nil {
				return err
			}
		}
		if len(rows) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tailPoll):
		}
	}
}

// eventLine is an event as a person reads it.
func eventLine(ev event.Event, e db.OutboxEvent) string {
	at := e.OccurredAt.Local().Format("2006-01-02 15:04:05.000") // a tail read the next day says which day
	if e.Split != nil {
		return fmt.Sprintf("%d  %s  %-15s  voucher %d  to %d buckets", e.Sequence, at, ev.Type, e.VoucherID, e.Split.Buckets)
	}
	line := fmt.Sprintf("%d  %s  %-15s  order %d  voucher %d  user %s", e.Sequence, at, ev.Type, e.OrderID, e.VoucherID, e.UserID)
	if d, ok := ev.Data.(event.Data); ok && d.Reason != "" {
		line += "  (" + d.Reason + ")"
	}
	return line
}
