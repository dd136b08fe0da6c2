package reaper

// WithRestoreHook runs f when the restorer has found voucher v lost and
// read the streams, before it reads MySQL and writes.
func WithRestoreHook(f func(v int64)) Option { return func(o *options) { o.signals.lost = f } }

// WithCreationHook runs f when the restorer has found voucher v just
// created with all its buckets but bucket 0, before it waits for it.
func WithCreationHook(f func(v int64)) Option { return func(o *options) { o.signals.creating = f } }
