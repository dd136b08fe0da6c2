package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/sale"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// createCommand creates a sale as POST /admin/v1/vouchers does: the same
// rules (voucher.Request), the voucher and its creation recorded in
// MySQL with the action (by cli:USER), then put in Redis; when Redis
// cannot take it now, the reaper does. A sale of units from flags, or
// any sale from the API's JSON body (--json).
func createCommand() app.Command[*config] {
	var (
		jsonFile, starts, ends string
		stock, limit           int64
		payWithin              time.Duration
		dry                    bool
	)
	return app.Command[*config]{Name: "create", Task: "Running a sale", Args: "[NAME]", NArgs: -1,
		Summary: "create a sale (as POST /admin/v1/vouchers): of units from the flags, or any kind from --json",
		Flags: func(fs *flag.FlagSet) {
			fs.Int64Var(&stock, "stock", 0, "the units on sale (a sale of units)")
			fs.Int64Var(&limit, "limit", 1, "the units one buyer may hold")
			fs.StringVar(&starts, "starts", "", "when it opens, a `TIME` as 2026-12-24T20:00:00Z (RFC 3339); now if not given")
			fs.StringVar(&ends, "ends", "", "when it closes, a `TIME` as --starts; never if not given")
			fs.DurationVar(&payWithin, "pay-within", 0, "how long a buyer has to pay (15m); the API's default if not given")
			fs.StringVar(&jsonFile, "json", "", "create from `FILE`, the API's body (- reads stdin): envelopes, codes, draws, rooms, gates, access")
			fs.BoolVar(&dry, "dry-run", false, "check the sale against the rules, and create nothing")
		},
		Run: func(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
			var req voucher.Request
			switch {
			case jsonFile != "" && (len(args) > 0 || stock != 0 || starts != "" || ends != ""):
				return errors.New("create takes --json FILE or NAME and flags, not both")
			case jsonFile != "":
				if err := readRequest(jsonFile, &req); err != nil {
					return err
				}
			case len(args) != 1:
				return errors.New(`create needs the sale's NAME (one argument: quote a name with spaces, "Winter lamp"), or --json FILE`)
			default:
				req = voucher.Request{Name: args[0], PerUserLimit: &limit}
				req.Stock = &stock
				for _, t := range []struct {
					flag string
					v    *string
					to   **string
				}{{"starts", &starts, &req.StartsAt}, {"ends", &ends, &req.EndsAt}} {
					if *t.v == "" {
						continue
					}
					if err := timeFlag(t.flag, *t.v); err != nil {
						return err
					}
					*t.to = t.v
				}
				if payWithin > 0 {
					secs := int64(payWithin / time.Second)
					req.PaymentTimeoutSeconds = &secs
				}
			}
			now := time.Now().UTC()
			v, items, err := req.Create(now, voucher.NewRand())
			var fe *sale.FieldError
			if errors.As(err, &fe) {
				return errors.New(fe.Msg)
			}
			if err != nil {
				return err
			}
			if dry {
				fmt.Printf("would create %s; nothing created (--dry-run)\n", describe(v))
				return nil
			}
			return withMySQL(ctx, cfg, time.Minute, func(ctx context.Context, mysql *db.Store) error {
				ch, err := mysql.CreateVoucher(ctx, &v, items, cliActor(), now)
				if err != nil {
					return err
				}
				if err := toRedis(ctx, cfg, rt, mysql, ch, now); err != nil {
					fmt.Printf("voucher %d created: %s; not yet in Redis (the reaper puts it there within its interval): %v\n", v.ID, describe(v), err)
					return nil
				}
				fmt.Printf("voucher %d created: %s\n", v.ID, describe(v))
				return nil
			})
		}}
}

// readRequest reads the API's creation body from file (- for stdin) as
// the API does: unknown fields refused, names matched exactly.
func readRequest(file string, req *voucher.Request) error {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close() //nolint:errcheck
		r = f
	}
	body, err := io.ReadAll(io.LimitReader(r, 8<<20))
	if err != nil {
		return err
	}
	if err := jsonv2.Unmarshal(body, req, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("%s is not a sale's JSON (the body of POST /admin/v1/vouchers): %w", file, err)
	}
	return nil
}

// describe says what sale v is, in words.
func describe(v db.Voucher) string {
	parts := []string{fmt.Sprintf("%q", v.Name), v.Kind, fmt.Sprintf("%d on sale", v.StockTotal), fmt.Sprintf("%d a buyer", v.PerUserLimit)}
	if v.StartsAt != nil {
		parts = append(parts, "opens "+v.StartsAt.UTC().Format(time.RFC3339))
	}
	if v.EndsAt != nil {
		parts = append(parts, "closes "+v.EndsAt.UTC().Format(time.RFC3339))
	}
	parts = append(parts, fmt.Sprintf("pay within %s", time.Duration(v.PaymentTimeoutSeconds)*time.Second))
	return strings.Join(parts, ", ")
}
