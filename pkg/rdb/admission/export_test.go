package admission

// FillClaims is the waiting claims that go beside a call in flight.
const FillClaims = fillClaims

// OnRefill runs f at the start of each refill of a dry bucket, before
// its read of the buckets' stocks.
func (adm *Admitter) OnRefill(f func()) { adm.signals.refill = f }

// DryWaiting is how many claims of v wait for its refill under way.
func (adm *Admitter) DryWaiting(v int64) int64 { return adm.dryOf(v).waiting.Load() }
