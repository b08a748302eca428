package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// heldCAS holds back the first manifest CAS it sees: the CAS is not applied,
// and the writer is told the connection reset after the request was sent,
// so it cannot know whether the CAS landed. The test lands it later with
// land, as a request delayed in the network would. Hooks run before every
// manifest read and every generation put.
type heldCAS struct {
	blob.Store
	mu         sync.Mutex
	armed      bool
	held       func() error
	beforeRead func(n int) // n counts manifest reads since the CAS was held
	reads      int
	genPut     func(ctx context.Context) error // nil lets generation puts through
}

func (s *heldCAS) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.reads = true, 0
}

func (s *heldCAS) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	s.mu.Lock()
	switch {
	case strings.HasSuffix(name, "/_manifest") && opts.IfMatch != "" && s.armed:
		s.armed = false
		data := append([]byte(nil), data...)
		s.held = func() error {
			_, err := s.Store.Put(context.Background(), name, data, opts)
			return err
		}
		s.mu.Unlock()
		return blob.Attrs{}, errors.New("test: connection reset after the request was sent")
	case !strings.HasSuffix(name, "/_manifest") && s.genPut != nil:
		hook := s.genPut
		s.mu.Unlock()
		if err := hook(ctx); err != nil {
			return blob.Attrs{}, err
		}
		return s.Store.Put(ctx, name, data, opts)
	}
	s.mu.Unlock()
	return s.Store.Put(ctx, name, data, opts)
}

func (s *heldCAS) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	s.mu.Lock()
	hook := s.beforeRead
	if strings.HasSuffix(name, "/_manifest") && s.held != nil {
		s.reads++
	} else {
		hook = nil
	}
	n := s.reads
	s.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return s.Store.Get(ctx, name, opts)
}

// land applies the held CAS.
func (s *heldCAS) land(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	if held == nil {
		t.Fatal("no CAS is held")
	}
	if err := held(); err != nil {
		t.Fatalf("landing the held CAS: %v", err)
	}
}

// A commit's CAS is held, and the re-read that resolves it finds nothing: the
// commit is rebased. Before the rebase re-reads the manifest, the held CAS
// lands and another writer claims the shard. The first attempt committed
// the record, so the append must be acknowledged, not reported fenced.
func TestRebaseThatFindsAClaimStillSeesItsLandedAttempt(t *testing.T) {
	ctx := context.Background()
	s := &heldCAS{Store: memstore.New()}
	w := openV1(t, s, "s")
	var other *Writer
	s.mu.Lock() // the writer's goroutines may read the manifest already
	s.beforeRead = func(n int) {
		if n != 2 { // 1 is resolve's read; 2 is the rebase's
			return
		}
		s.land(t)
		o, err := Open(ctx, s.Store, "s", testOptionsV1(t))
		if err != nil {
			t.Errorf("competing Open: %v", err)
			return
		}
		other = o
	}
	s.mu.Unlock()
	s.arm()
	rs, err := w.Append(ctx, entries(t, "x"))
	if other != nil {
		defer other.Abort()
	}
	if err != nil {
		t.Fatalf("append whose first attempt landed before the claim: %v, want success", err)
	}
	l := newLedger()
	l.add(t, rs)
	l.verify(t, s.Store, "s")
}

// After a rebase, the new attempt fails before its CAS is sent. The first
// attempt's CAS was sent and may still land, so the append's outcome is
// unknown, never "not sent" or a plain storage error, which would tell the
// caller it was not stored. The test then lands the CAS to show why.
func TestFailureAfterARebaseIsOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		genPut func(w *Writer, bg *sync.WaitGroup) func(ctx context.Context) error
	}{
		{"storage error", func(*Writer, *sync.WaitGroup) func(context.Context) error {
			return func(context.Context) error { return errors.New("test: disk on fire") }
		}},
		{"abort", func(w *Writer, bg *sync.WaitGroup) func(context.Context) error {
			return func(ctx context.Context) error {
				// Not Abort itself: it waits for this committer. The test
				// waits for it before it ends, or the writer could log after
				// the test and race testing's bookkeeping.
				bg.Go(w.Abort)
				<-ctx.Done()
				return ctx.Err()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := &heldCAS{Store: memstore.New()}
			w := openV1(t, s, "s")
			var bg sync.WaitGroup
			defer bg.Wait()
			s.mu.Lock() // the writer's goroutines may read the manifest already
			s.beforeRead = func(n int) {
				if n == 2 { // the rebase's read: its generation put fails next
					s.mu.Lock()
					s.genPut = tc.genPut(w, &bg)
					s.mu.Unlock()
				}
			}
			s.mu.Unlock()
			s.arm()
			_, err := w.Append(ctx, entries(t, "x"))
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("append whose first attempt was sent: %v, want ErrOutcomeUnknown", err)
			}
			s.land(t)
			if n := countRecords(t, s.Store, "s")["x"]; n != 1 {
				t.Fatalf("x stored %d times after the held CAS landed, want 1", n)
			}
		})
	}
}

// casHook holds generation puts while hold is set, and runs afterCAS after
// every manifest CAS that landed.
type casHook struct {
	blob.Store
	mu       sync.Mutex
	hold     chan struct{}
	afterCAS func()
}

func (s *casHook) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	s.mu.Lock()
	hold, after := s.hold, s.afterCAS
	s.mu.Unlock()
	manifest := strings.HasSuffix(name, "/_manifest")
	if !manifest && hold != nil {
		<-hold
	}
	attrs, err := s.Store.Put(ctx, name, data, opts)
	if manifest && opts.IfMatch != "" && err == nil && after != nil {
		after()
	}
	return attrs, err
}

// W appends [x, y] while P's append of x is queued: W's y commits, and W
// then waits for x, which P withdraws (its caller gave up). W must not be
// told its append was not stored: y is. Before, W tried again on its own,
// its context ended meanwhile, and it heard "not sent".
func TestAppendPartlyCommittedIsOutcomeUnknown(t *testing.T) {
	s := &casHook{Store: memstore.New()}
	w := openV1(t, s, "s")
	hold := make(chan struct{})
	s.mu.Lock()
	s.hold = hold
	s.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "z")) }) // held in its put
	waitTaken(t, w)
	ctxP, cancelP := context.WithCancel(context.Background())
	pDone := make(chan error, 1)
	go func() { _, err := w.Append(ctxP, entries(t, "x")); pDone <- err }()
	waitQueue(t, w, 1)
	ctxW, cancelW := context.WithCancel(context.Background())
	defer cancelW()
	var wErr error
	wg.Go(func() { _, wErr = w.Append(ctxW, entries(t, "x", "y")) })
	waitQueue(t, w, 2) // P's [x], then W's own [y]
	cancelP()
	if err := <-pDone; err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("P, withdrawn while queued: %v, want not sent", err)
	}
	s.mu.Lock()
	cas := 0
	s.afterCAS = func() { // the held commit's CAS, then y's: W gives up just as y commits
		if cas++; cas == 2 {
			cancelW()
		}
	}
	s.hold = nil
	s.mu.Unlock()
	close(hold)
	wg.Wait()

	if n := countRecords(t, s.Store, "s")["y"]; n != 1 {
		t.Fatalf("y stored %d times; the test did not set up what it meant to", n)
	}
	if !errors.Is(wErr, ErrOutcomeUnknown) {
		t.Fatalf("W, whose y is stored: %v, want ErrOutcomeUnknown", wErr)
	}
}

// waitTaken waits until the committer took what was queued.
func waitTaken(t *testing.T, w *Writer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.w.mu.Lock()
		taken := w.w.queued > 0 && len(w.w.queue) == 0
		w.w.mu.Unlock()
		if taken {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer took nothing")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// genScript holds or fails generation puts in turn: the n-th generation
// put does steps[n] ("hold" until release is closed, "fail", or pass).
type genScript struct {
	blob.Store
	mu      sync.Mutex
	n       int
	steps   []string
	held    chan struct{} // closed when a put is held
	release chan struct{}
}

func newGenScript(inner blob.Store, steps ...string) *genScript {
	return &genScript{Store: inner, steps: steps, held: make(chan struct{}), release: make(chan struct{})}
}

func (s *genScript) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	if !strings.HasSuffix(name, "/_manifest") {
		s.mu.Lock()
		step := ""
		if s.n < len(s.steps) {
			step = s.steps[s.n]
		}
		s.n++
		s.mu.Unlock()
		switch step {
		case "hold":
			close(s.held)
			<-s.release
		case "fail":
			return blob.Attrs{}, errors.New("test: generation put refused")
		}
	}
	return s.Store.Put(ctx, name, data, opts)
}

// W appends [x, z] while P's append of x is in flight, and W's own z is
// refused (backpressure): x may still land through P, so W must not hear
// that nothing of its append is stored.
func TestOwnFailureWhileASharedIDMayLandIsOutcomeUnknown(t *testing.T) {
	s := newGenScript(memstore.New(), "hold")
	opts := testOptionsV1(t)
	opts.MaxQueuedBytes = 1 // anything more than what is in flight is refused
	w, err := Open(context.Background(), s, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	pDone := make(chan error, 1)
	go func() { _, err := w.Append(context.Background(), entries(t, "x")); pDone <- err }()
	<-s.held
	_, wErr := w.Append(context.Background(), entries(t, "x", "z"))
	close(s.release)
	if err := <-pDone; err != nil {
		t.Fatalf("P: %v", err)
	}
	if !errors.Is(wErr, ErrOutcomeUnknown) || !errors.Is(wErr, ErrBackpressure) {
		t.Fatalf("W, refused while its shared x was in flight: %v, want ErrOutcomeUnknown (and the backpressure)", wErr)
	}
}

// W = [y, x] waits for P2's y (committed) and P1's x (whose commit fails):
// y is stored, so W's answer must not say nothing was.
func TestSharedSuccessThenSharedFailureIsOutcomeUnknown(t *testing.T) {
	s := newGenScript(memstore.New(), "hold", "fail")
	opts := testOptionsV1(t)
	opts.RetryBackoff = time.Millisecond
	w, err := Open(context.Background(), s, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "y")) }) // P2, held
	<-s.held
	wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "x")) }) // P1, queued
	waitQueue(t, w, 1)
	wDone := make(chan error, 1)
	go func() { _, err := w.Append(context.Background(), entries(t, "y", "x")); wDone <- err }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.w.mu.Lock()
		waiting := len(w.w.queue) == 1 // W queued nothing of its own: both its ids are shared
		w.w.mu.Unlock()
		if waiting || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // W is now waiting on both
	close(s.release)
	wg.Wait()
	err = <-wDone
	if n := countRecords(t, s.Store, "s")["y"]; n != 1 {
		t.Fatalf("y stored %d times; the test did not set up what it meant to", n)
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("W, whose y is stored: %v, want ErrOutcomeUnknown", err)
	}
}

// A commit lands but its answer is lost and the re-read fails: the caller
// hears ErrOutcomeUnknown and retries with the same id. The retry's commit
// cannot re-read the manifest either. The first try may hold the record,
// so the retry must not hear "not committed".
func TestRetryOfAnUnresolvedCommitIsNotToldNotCommitted(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	w := openV1(t, fs, "s")
	manifest := format.ManifestName("s")
	ctx := context.Background()
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: manifest, Fault: faultstore.LoseResponse, Count: 1})
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: manifest, Fault: faultstore.Fail, Count: 1, Err: errors.New("injected: internal error")})
	if _, err := w.Append(ctx, entries(t, "c")); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first try: %v, want ErrOutcomeUnknown", err)
	}
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: manifest, Fault: faultstore.Fail, Count: 1, Err: errors.New("injected: internal error")})
	_, err := w.Append(ctx, entries(t, "c"))
	if n := countRecords(t, fs.Inner(), "s")["c"]; n != 1 {
		t.Fatalf("c stored %d times, want once", n)
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("retry whose commit could not re-read the manifest: %v, want ErrOutcomeUnknown (c is stored)", err)
	}
}
