package defaults

import (
	"testing"
	"time"
)

func TestPositiveFillsZeroAndNegativeOnly(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, 7}, {-1, 7}, {1, 1}, {9, 9}} {
		got := c.in
		Positive(&got, 7)
		if got != c.want {
			t.Errorf("Positive(%d, 7) = %d, want %d", c.in, got, c.want)
		}
	}
	d := -time.Second
	Positive(&d, 2*time.Second)
	if d != 2*time.Second {
		t.Errorf("Positive(-1s, 2s) = %v, want 2s", d)
	}
	f := 0.5
	Positive(&f, 3)
	if f != 0.5 {
		t.Errorf("Positive(0.5, 3) = %v, want 0.5", f)
	}
}
