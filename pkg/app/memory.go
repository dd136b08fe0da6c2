package app

import (
	"math"
	"runtime/debug"
)

// MemoryLimitShare is the share of the container's memory limit
// (FLASHSALE_MEMORY_LIMIT) a process sets as Go's soft memory limit, as
// GOMEMLIMIT would: near it the garbage collector runs harder instead of
// letting the heap grow into the kernel's OOM killer. The rest is for
// what that limit does not count: the binary's own pages (~23 MiB of a
// gateway's RSS) and the kernel's socket buffers. 80 % of the chart's
// 256 MiB leaves them 51 MiB; of the reaper's 128 MiB, 26.
const MemoryLimitShare = 0.8

// minMemoryLimit refuses a limit too small to run in (a unit mistaken:
// 256 for 256Mi): below it every process would only collect garbage.
const minMemoryLimit = 32 << 20

// SoftMemoryLimit is the Go memory limit for a container limit of limit
// bytes, given the limit Go runs with now (current; math.MaxInt64 unless
// GOMEMLIMIT set one): 0, leave it, when limit is 0 or GOMEMLIMIT set one.
func SoftMemoryLimit(limit, current int64) int64 {
	if limit <= 0 || current != math.MaxInt64 {
		return 0
	}
	return int64(float64(limit) * MemoryLimitShare)
}

// applyMemoryLimit sets Go's soft memory limit from c.MemoryLimit.
func (c Common) applyMemoryLimit() {
	if n := SoftMemoryLimit(c.MemoryLimit, debug.SetMemoryLimit(-1)); n > 0 {
		debug.SetMemoryLimit(n)
	}
}
