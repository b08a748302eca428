package clock

import (
	"testing"
	"time"
)

func TestFakeFiresOnlyWhenDue(t *testing.T) {
	f := NewFake(time.Unix(100, 0))
	ch := f.After(10 * time.Second)
	f.Advance(9 * time.Second)
	select {
	case <-ch:
		t.Fatal("timer fired 1s early")
	default:
	}
	if f.Waiters() != 1 {
		t.Fatalf("Waiters = %d, want 1", f.Waiters())
	}
	f.Advance(time.Second)
	select {
	case got := <-ch:
		if want := time.Unix(110, 0); !got.Equal(want) {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	default:
		t.Fatal("timer did not fire when due")
	}
	if f.Waiters() != 0 {
		t.Fatalf("Waiters = %d after firing, want 0", f.Waiters())
	}
}

func TestFakeZeroDurationFiresAtOnce(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	select {
	case <-f.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
}
