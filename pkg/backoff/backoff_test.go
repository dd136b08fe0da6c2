package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesUpToMaxWithJitter(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		d := b.Next()
		if d > w || d < w*8/10 {
			t.Fatalf("pause %d = %s, want within [%s, %s]", i, d, w*8/10, w)
		}
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after Reset the pause is %s, want at most 100ms", d)
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(time.Hour, time.Hour).Wait(ctx); err != context.Canceled {
		t.Fatalf("Wait on a cancelled context = %v, want context.Canceled", err)
	}
}
