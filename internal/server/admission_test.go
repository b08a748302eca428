package server

import (
	"crypto/tls"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

const appendMethod = "/rollout.v1.RolloutService/Append"

// The attack of issue 17 on one connection: streams that each declare a
// maximal message and send all of it but its last byte. The budget admits
// only what fits the connection's share and refuses the rest (BACKPRESSURE,
// once admissionWait has passed) before their bodies are read; other
// clients' Appends and Gets succeed meanwhile; and the receive timeout
// resets the stalled streams and releases their charge.
func TestStalledStreamsAreBoundedAndReset(t *testing.T) {
	const (
		maxMsg      = 1 << 20
		recvTimeout = admissionWait + 2*time.Second
		streams     = 12
	)
	ts := startTCP(t, Config{MaxMessageBytes: maxMsg, MaxRecordBytes: maxMsg / 2, RequestBudgetBytes: 24 << 20, RecvTimeout: recvTimeout})
	b := ts.admission.budget
	attacker := dialRawH2(t, ts.addr, nil)

	start := time.Now()
	ids := make([]uint32, streams)
	sent := make([]int, streams)
	var wg sync.WaitGroup
	for i := range ids {
		ids[i] = attacker.open(appendMethod)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent[i] = attacker.send(ids[i], maxMsg, maxMsg-1, recvTimeout-500*time.Millisecond)
		}()
	}
	wg.Wait()
	var stalled []uint32
	refused := 0
	for i, id := range ids {
		e, ended := attacker.end(id, 0)
		if !ended {
			if sent[i] != maxMsg-1 {
				t.Fatalf("stream %d: neither refused nor read: sent %d of %d bytes", id, sent[i], maxMsg-1)
			}
			stalled = append(stalled, id)
			continue
		}
		refused++
		if sent[i] >= maxMsg/2 {
			t.Errorf("stream %d: refused after the server read %d bytes of its body", id, sent[i])
		}
		checkBackpressure(t, e.status)
	}
	if refused == 0 || len(stalled) == 0 {
		t.Fatalf("%d streams stalled, %d refused: want the connection's share to admit some and refuse the rest", len(stalled), refused)
	}
	if used := b.inUse(); used > b.connLimit || used < int64(len(stalled))*maxMsg {
		t.Errorf("budget in use %d with %d stalled streams: want at least %d and at most the connection's share %d", used, len(stalled), len(stalled)*maxMsg, b.connLimit)
	}
	t.Logf("%d streams stalled, %d refused; budget in use %d of %d (connection share %d)", len(stalled), refused, b.inUse(), b.limit, b.connLimit)

	// Meanwhile, another client appends and reads.
	c := dial(t, ts.addr, nil)
	if _, err := c.Append(rpcCtx(t), appendReq("bystander", "b1")); err != nil {
		t.Fatalf("another client's Append while the attack holds its share: %v", err)
	}
	if _, err := c.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "bystander", Id: "b1"}); err != nil {
		t.Fatalf("another client's Get while the attack holds its share: %v", err)
	}

	// The receive timeout resets every stalled stream.
	for _, id := range stalled {
		e, ok := attacker.end(id, recvTimeout+3*time.Second)
		switch {
		case !ok:
			t.Fatalf("stream %d still open %s after it stalled: the receive timeout did not reset it", id, time.Since(start))
		case !e.isRST && e.status.Code() != codes.DeadlineExceeded:
			t.Errorf("stream %d ended with %v, want DEADLINE_EXCEEDED or a reset", id, e.status)
		}
	}
	if took := time.Since(start); took < recvTimeout {
		t.Errorf("stalled streams ended after %s, before the receive timeout %s", took, recvTimeout)
	}
	waitFor(t, func() bool { return b.inUse() == 0 })
	refusals := ts.admission.refused
	if got := testutil.ToFloat64(refusals.WithLabelValues(refusedConnection)); got != float64(refused) {
		t.Errorf("connection_share refusals counted %v, want %d", got, refused)
	}
	if got := testutil.ToFloat64(refusals.WithLabelValues(refusedRecvTimeout)); got != float64(len(stalled)) {
		t.Errorf("recv_timeout refusals counted %v, want %d", got, len(stalled))
	}
}

// checkBackpressure checks that st is a budget refusal a client retries:
// RESOURCE_EXHAUSTED, reason BACKPRESSURE, with a RetryInfo.
func checkBackpressure(t *testing.T, st *status.Status) {
	t.Helper()
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("refused with %v, want RESOURCE_EXHAUSTED", st)
	}
	var reason string
	var retry bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration() > 0
		}
	}
	if reason != rolloutv1.ErrorReason_BACKPRESSURE.String() || !retry {
		t.Errorf("refusal %q has reason %q and RetryInfo %v, want %s with a RetryInfo", st.Message(), reason, retry, rolloutv1.ErrorReason_BACKPRESSURE.String())
	}
}

// Under mTLS, an identity with no grant at all is refused when its stream's
// headers arrive, before its body is read, and counted as a denial; so is
// an identity whose rolloutd-shard header names a shard it may not use. An
// allowed header is admitted.
func TestNoGrantsRefusedBeforeTheBody(t *testing.T) {
	as := startAuthz(t, testPolicy)
	tlsFor := func(id string) *tls.Config {
		leaf := as.p.clientCA.ClientURI(t, id)
		return &tls.Config{RootCAs: as.p.serverCA.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{leaf.TLS(t)}}
	}
	b := as.admission.budget
	denied := func() float64 { return testutil.ToFloat64(as.guard.denied.WithLabelValues("append")) }

	other := dialRawH2(t, as.addr, tlsFor(idOther))
	id := other.open(appendMethod)
	sent := other.send(id, 1<<20, 1<<20-1, 5*time.Second)
	e, ok := other.end(id, time.Second)
	if !ok || e.status.Code() != codes.PermissionDenied {
		t.Fatalf("an identity without grants: ended %v with %v, want PERMISSION_DENIED", ok, e.status)
	}
	if sent >= 1<<19 {
		t.Errorf("refused after the server read %d bytes of the body", sent)
	}
	if got := denied(); got != 1 {
		t.Errorf("rolloutd_rpc_denied_total{verb=append} is %v, want 1", got)
	}

	trainer := dialRawH2(t, as.addr, tlsFor(idTrainer))
	id = trainer.open(appendMethod, ShardHeader, "team-b/x")
	if e, ok := trainer.end(id, time.Second); !ok || e.status.Code() != codes.PermissionDenied {
		t.Fatalf("a rolloutd-shard header naming a shard the identity may not append to: ended %v with %v, want PERMISSION_DENIED", ok, e.status)
	}
	if got := denied(); got != 2 {
		t.Errorf("rolloutd_rpc_denied_total{verb=append} is %v, want 2", got)
	}
	if got := testutil.ToFloat64(as.admission.refused.WithLabelValues(refusedNoGrants)); got != 2 {
		t.Errorf("no_grants refusals counted %v, want 2", got)
	}
	if used := b.inUse(); used != 0 {
		t.Errorf("refused streams hold %d bytes of the budget", used)
	}

	id = trainer.open(appendMethod, ShardHeader, "team-a/run1")
	if e, ok := trainer.end(id, 200*time.Millisecond); ok {
		t.Fatalf("an allowed rolloutd-shard header: refused with %v", e.status)
	}
	if used := b.inUse(); used < int64(as.cfg.MaxMessageBytes) {
		t.Errorf("an admitted stream holds %d bytes of the budget, want at least MaxMessageBytes", used)
	}
}

// A Scan holds its small decoded cost while it streams, not the message
// limit; unary calls release what they held when they end.
func TestChargesFollowDecodedRequests(t *testing.T) {
	ts := startTCP(t, Config{})
	b := ts.admission.budget
	c := dial(t, ts.addr, nil)
	if _, err := c.Append(rpcCtx(t), appendReq("s", "r1", "r2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return b.inUse() == 0 })

	ctx := rpcCtx(t)
	stream, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: "s", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	used := b.inUse()
	if used == 0 || used > 2*streamWindow {
		t.Errorf("an open Scan holds %d bytes of the budget, want its decoded request and window (under %d)", used, 2*streamWindow)
	}
	if got := ts.admission.refused.WithLabelValues(refusedRecvTimeout); testutil.ToFloat64(got) != 0 {
		t.Errorf("a Scan's receive timer fired")
	}
}

// A burst of small requests on one connection waits for the message charge
// instead of being refused: each holds it only until it is decoded. (With
// the message charged in the tap, 217 of 320 such Gets were refused.)
func TestBurstOfSmallRequestsIsAdmitted(t *testing.T) {
	// The default message limit and a pod's budget: a connection's share
	// holds 8 undecoded messages.
	ts := startTCP(t, Config{RequestBudgetBytes: 540 << 20})
	c := dial(t, ts.addr, nil)
	if _, err := c.Append(rpcCtx(t), appendReq("s", "r1")); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	for range 3 {
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "s", Id: "r1"}); err != nil {
					refused.Add(1)
					t.Errorf("Get in a burst: %v", err)
				}
			}()
		}
		wg.Wait()
	}
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of 192 Gets failed", n)
	}
	waitFor(t, func() bool { return ts.admission.budget.inUse() == 0 })
}

// Every service the server serves was registered through the admission:
// a service registered around it would read bodies uncharged.
func TestEveryServiceIsAdmitted(t *testing.T) {
	s, err := New(Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	stopUnserved(t, s)
	for name := range s.grpc.GetServiceInfo() {
		if !slices.Contains(s.admission.admitted, name) {
			t.Errorf("service %s is not registered through the admission", name)
		}
	}
}
