// Package testclock gives tests the times they write to a store. Redis keys
// carry EXPIREAT deadlines and MySQL rows are compared with NOW(), so a time
// a test writes must come from the clock, never from a calendar date: a sale
// seeded on a fixed day ends, and its keys expire as they are written, once
// the calendar passes that day. TestNoCalendarDatesInTests keeps
// it so.
package testclock

import "time"

// Start returns the start of a test's sale: the clock's now in UTC,
// truncated to the hour, so that a test adding minutes (up to 59) to it
// stays in one UTC day and in one order-id millisecond range it can predict.
// It is at most an hour in the past: anything a test derives from it with
// a TTL of an hour or more is still alive when written.
func Start() time.Time {
	return time.Now().UTC().Truncate(time.Hour)
}

// BeforeMidnight returns the instant d before the last midnight in loc
// that has passed, for tests of what rolls over at midnight: a time from
// the clock, at most a day and d in the past.
func BeforeMidnight(loc *time.Location, d time.Duration) time.Time {
	now := time.Now().In(loc)
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	return midnight.Add(-d)
}
