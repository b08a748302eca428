package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNow is a settable clock.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func newTestLimiter(t *testing.T, bps float64, burst int) (*Limiter, *fakeNow) {
	t.Helper()
	l, err := New(bps, burst)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeNow{t: time.Unix(1_000_000, 0)}
	l.now = clk.now
	return l, clk
}

func TestTakeAndRetry(t *testing.T) {
	l, clk := newTestLimiter(t, 1000, 2000)
	if err := l.Take("a", 2000); err != nil {
		t.Fatalf("a full burst: %v", err)
	}
	err := l.Take("a", 500)
	var le *LimitedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimited) {
		t.Fatalf("over the limit: %v", err)
	}
	if le.Retry != 500*time.Millisecond || le.Identity != "a" {
		t.Errorf("retry %v for 500 bytes at 1000 B/s from empty, want 500ms; %+v", le.Retry, le)
	}
	if !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), "retry") {
		t.Errorf("message %q", err)
	}
	// The refusal charged nothing: after the hinted wait, the call fits.
	clk.advance(le.Retry)
	if err := l.Take("a", 500); err != nil {
		t.Errorf("after the hinted wait: %v", err)
	}
	// Another identity has its own bucket.
	if err := l.Take("b", 2000); err != nil {
		t.Errorf("b is limited by a's use: %v", err)
	}
}

func TestCallLargerThanBurst(t *testing.T) {
	l, _ := newTestLimiter(t, 1000, 2000)
	err := l.Take("a", 2001)
	var le *LimitedError
	if !errors.As(err, &le) || le.Retry != 0 || !strings.Contains(err.Error(), "split the batch") {
		t.Errorf("a call over the burst: %v", err)
	}
	if err := l.Take("a", 2000); err != nil {
		t.Errorf("the refused call was charged: %v", err)
	}
}

// Over a long run, an identity gets its rate and no more.
func TestSustainedRate(t *testing.T) {
	l, clk := newTestLimiter(t, 10_000, 10_000)
	admitted := 0
	for range 10_000 { // 10 s in steps of 1 ms, offering 1000 B each: 100x the rate
		if l.Take("a", 1000) == nil {
			admitted += 1000
		}
		clk.advance(time.Millisecond)
	}
	// 10 s × 10 kB/s, plus the initial burst.
	if want := 110_000; admitted < want-1000 || admitted > want+1000 {
		t.Errorf("admitted %d bytes in 10 s at 10 kB/s with a 10 kB burst, want about %d", admitted, want)
	}
}

// Idle buckets are dropped, so memory stays bounded by active identities.
func TestIdleBucketsSwept(t *testing.T) {
	l, clk := newTestLimiter(t, 1000, 1000)
	for i := range sweepEvery - 1 {
		if err := l.Take(fmt.Sprintf("id-%d", i), 10); err != nil {
			t.Fatal(err)
		}
	}
	if l.Len() != sweepEvery-1 {
		t.Fatalf("%d buckets", l.Len())
	}
	clk.advance(time.Second) // every bucket refills
	_ = l.Take("last", 10)   // the sweep runs on this call
	if n := l.Len(); n != 1 {
		t.Errorf("%d buckets after the sweep, want 1", n)
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range [][2]float64{{0, 1}, {1, 0}, {-1, 1}} {
		if _, err := New(c[0], int(c[1])); err == nil {
			t.Errorf("New(%v, %v) accepted", c[0], c[1])
		}
	}
}

func TestConcurrentTake(t *testing.T) {
	l, err := New(1e9, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				_ = l.Take(fmt.Sprintf("id-%d", (g*i)%50), 100)
			}
		})
	}
	wg.Wait()
}

// A cost limiter admits a call while its identity is not in debt, charges
// what the call cost after it, into debt beyond the burst, and refuses
// with the time the debt takes to repay.
func TestCostLimiter(t *testing.T) {
	l, err := NewCost("listing", "store ops", 100, 50)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeNow{t: time.Unix(1_000_000, 0)}
	l.now = clk.now
	if err := l.Admit("a"); err != nil {
		t.Fatal(err)
	}
	l.Charge("a", 250) // five bursts' worth: 200 in debt
	if got := l.Tokens("a"); got != -200 {
		t.Fatalf("tokens after charging 250 of 50 = %v, want -200", got)
	}
	var le *LimitedError
	if err := l.Admit("a"); !errors.As(err, &le) || (le.Retry-2010*time.Millisecond).Abs() > time.Millisecond || !strings.Contains(err.Error(), "listing rate limit") {
		t.Fatalf("Admit in debt = %v, want a refusal for 2.01s", err)
	}
	if err := l.Admit("b"); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	clk.advance(2011 * time.Millisecond)
	if err := l.Admit("a"); err != nil {
		t.Fatalf("after the debt was repaid: %v", err)
	}
}
