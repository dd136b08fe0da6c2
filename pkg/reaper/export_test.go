package reaper

// WithRestoreHook runs f when the restorer has found voucher v lost and
// read the streams, before it reads MySQL and writes.
func WithRestoreHook(f func(v int64)) Option { return func(o *options) { o.restoreHook = f } }
