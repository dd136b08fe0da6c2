package voucher

import (
	"time"

	"github.com/flashsale/flashsale/pkg/db"
)

// Access asks for access codes (pkg/access) on a voucher's claims and
// room joins: until a time (a presale: anyone may claim after it, the
// limits unchanged), or with no until, for the whole sale.
type Access struct {
	Until *string `json:"until"`
}

// AccessOf is v's access codes as the API shows them, nil without.
func AccessOf(v db.Voucher) *Access {
	switch {
	case v.Access == 0:
		return nil
	case v.Access == db.AccessWholeSale:
		return &Access{}
	}
	until := time.UnixMilli(v.Access).UTC().Format(time.RFC3339Nano)
	return &Access{Until: &until}
}

// value checks a and returns it as db.Voucher.Access: until must be in
// the future, and after the sale's start (starts, nil when none).
func (a Access) value(now time.Time, starts *time.Time) (int64, error) {
	until, err := ParseTime("access.until", a.Until)
	switch {
	case err != nil:
		return 0, err
	case until == nil:
		return db.AccessWholeSale, nil
	case !until.After(now):
		return 0, invalid("access", "access.until must be in the future: codes that held only in the past would ask for none")
	case starts != nil && !until.After(*starts):
		return 0, invalid("access", "access.until must be after starts_at: codes that hold only before the sale would ask for none")
	}
	return until.UnixMilli(), nil
}
