package order

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// Days names every instant as Day does, across midnights and the days a
// time zone's clocks change (Sao Paulo skipped its midnight in some years;
// Lord Howe moves by half an hour), in any order of instants and from
// several goroutines at once.
func TestDaysNamesEachInstantAsDayDoes(t *testing.T) {
	for _, zone := range []string{"UTC", "Asia/Shanghai", "America/Sao_Paulo", "Australia/Lord_Howe", "America/New_York"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skipf("time zone %s: %v (tzdata not installed)", zone, err)
		}
		d := NewDays(loc)
		base := time.Date(2018, 11, 3, 0, 0, 0, 0, time.UTC) // fixed date: a day Sao Paulo skipped its midnight (2018-11-04), formatted only, never stored
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for i := range 20_000 {
					var at time.Time
					if i%2 == 0 { // walking forward through three days, a minute and some at a time
						at = base.Add(time.Duration(i/2) * 13 * time.Second)
					} else { // anywhere in ten years
						at = base.Add(time.Duration(rng.Int64N(int64(10 * 365 * 24 * time.Hour))))
					}
					if got, want := d.Of(at), Day(at, loc); got != want {
						t.Errorf("%s: Days.Of(%s) = %s, Day = %s", zone, at, got, want)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

func BenchmarkDay(b *testing.B) {
	loc, _ := time.LoadLocation("Asia/Shanghai")
	now := time.Now()
	b.Run("Day", func(b *testing.B) {
		for b.Loop() {
			_ = Day(now, loc)
		}
	})
	d := NewDays(loc)
	b.Run("Days.Of", func(b *testing.B) {
		for b.Loop() {
			_ = d.Of(now)
		}
	})
}
