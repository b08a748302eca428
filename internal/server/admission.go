package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/authz"
)

// Admission: what a request may hold in memory, decided before gRPC reads
// its body.
//
// gRPC reads a request's body when its handler asks for the message: the
// 5-byte prefix declares the length, and the transport opens the stream's
// flow-control window to it, so a client can make the server buffer up to
// MaxMessageBytes per stream before any interceptor runs. Until then, a
// stream holds at most its (static) window and its headers. So:
//
//  1. The tap handle, which runs on the connection's reader goroutine when
//     a stream's headers arrive, charges the stream's floor (its window
//     and its headers) against the budget, its connection's share and its
//     client identity's share, and refuses the stream at once
//     (RESOURCE_EXHAUSTED, BACKPRESSURE, RetryInfo) when that does not fit.
//     Under an authorization policy it refuses a RolloutService call from
//     an identity without any grant, or one whose rolloutd-shard header
//     names a shard it may not use (PERMISSION_DENIED). It starts the
//     receive timer. It never blocks.
//  2. Every service's handlers are wrapped (admission.registrar): on the
//     stream's own goroutine, before the message is asked for, the stream
//     charges readCostFactor times MaxMessageBytes more (gRPC holds the
//     message's wire bytes and its decoded copy before any of our code sees
//     it), waiting up to admissionWait for it to fit, and is refused
//     (BACKPRESSURE) if it does not. A stream waiting holds only its floor.
//  3. Once the message is decoded, the receive timer stops and the charge
//     becomes what the request costs decoded (decodedCostFactor times its
//     size, plus the floor), which may refuse it now.
//  4. The charge is held until both the handler has returned and the
//     stream has ended (its context is done), then released.
//
// The tap does not charge the message itself, though it could: a burst
// of small requests on one connection (64 concurrent Gets) would then find
// the connection's share spent by requests that are only about to be
// decoded, and most of them were refused. Charging on the stream's own
// goroutine lets them wait microseconds instead, while what a stream can
// buffer stays charged before it can buffer it.
//
// A stream whose message has not arrived within the receive timeout has its
// context cancelled: gRPC stops waiting for the body, drops what it
// buffered, and the call ends DEADLINE_EXCEEDED.
//
// The connection is known to the tap through a stats.Handler: grpc-go calls
// TagConn for each new connection before it reads any stream, and every
// stream's context (the tap's included) derives from the context TagConn
// returns (grpc-go v1.85, server.go serveStreams and
// internal/transport/http2_server.go operateHeaders). The peer, and so the
// mTLS identity, is in that context too.

// Admission defaults and constants.
const (
	// decodedCostFactor is what a request holds in memory at its peak,
	// per byte of its encoded size. Measured with Appends of 16 × 3.9 MB,
	// 4 × 15.7 MB, 1 × 60 MB and 1000 × 60 kB records against the local
	// store: the heap grew by 6.5–7.6× the request's size in one process
	// holding client and server, of which the client's encoding is about
	// 1–2×; the server alone: gRPC's wire buffers (1×), the decoded request
	// (1×), the prepared records (1×), the generation being written (1×),
	// and garbage of the same not yet collected. Four is the server's
	// live peak; the budget's fraction of the memory limit leaves the
	// garbage collector its headroom.
	decodedCostFactor = 4
	// readCostFactor is what a message holds, per byte of the message
	// limit, until our code sees it: gRPC reads the wire bytes, then
	// decodes a copy before freeing them. (Compressed messages are refused:
	// no decompressor is registered.) Charging only the limit let refused
	// requests hold a decoded copy each beyond the budget: peak RSS was 25%
	// higher with clients saturating it.
	readCostFactor = 2
	// streamWindow is every stream's HTTP/2 flow-control window: what a
	// client may send on a stream beyond the message the server is reading.
	// It is static: gRPC's dynamic windows (BDP estimation) would let a
	// client grow it to 16 MiB per stream, unaccounted. A large message
	// still arrives at full speed: the transport opens the window to the
	// length the message declares while it reads it.
	streamWindow = 64 << 10
	// connWindow is every connection's flow-control window. It bounds
	// bytes in flight, not bytes held (the transport returns it as bytes
	// arrive), so it is as large as dynamic windows would grow it.
	connWindow = 16 << 20
	// maxHeaderListBytes bounds a stream's headers (gRPC's default is 16
	// MiB, which a stream holds as its metadata for its whole life).
	// Shard names are at most 255 bytes.
	maxHeaderListBytes = 64 << 10
	// headerFieldOverhead is what HTTP/2 counts per header field beyond its
	// name and value (RFC 9113, section 6.5.2).
	headerFieldOverhead = 32
	// admissionWait is how long a stream waits for its message's charge
	// to fit before it is refused: requests being decoded release most of
	// theirs within microseconds, and Appends within a commit.
	admissionWait = time.Second
	// overBudgetRetry is the RetryInfo delay of a request refused over the
	// budget: requests in flight release their charge when they finish, in
	// tens of milliseconds (a Get) to a few hundred (a large Append).
	overBudgetRetry = 200 * time.Millisecond
)

// DefaultRecvTimeout is how long a request's message may take to arrive
// after its headers.
const DefaultRecvTimeout = 10 * time.Second

// ShardHeader is the request metadata key naming the shard a call acts on,
// as the Go client sends it on every call (package client). Under an authorization
// policy, a call whose header names a shard the caller may not use is
// refused before its body is read; the shard in the request is checked as
// always.
const ShardHeader = "rolloutd-shard"

// Reasons of rolloutd_admission_refusals_total.
const (
	refusedServer      = "budget"
	refusedConnection  = "connection_share"
	refusedIdentity    = "identity_share"
	refusedRecvTimeout = "recv_timeout"
	refusedNoGrants    = "no_grants"
)

// errRecvTimeout is the cause of a stream cancelled by the receive timeout.
var errRecvTimeout = errors.New("the request message did not arrive in time")

// admission charges requests against the budget (see above).
type admission struct {
	budget      *budget
	maxMessage  int64
	recvTimeout time.Duration
	authz       *authz.Authorizer // nil: no policy
	guard       *guard            // counts and logs denials
	log         *zap.Logger       // sampled

	refused *prometheus.CounterVec
	gauges  []prometheus.Collector

	// Responses (responses.go).
	sendTimeout   time.Duration
	sendTimeouts  prometheus.Counter
	maxRecord     int64 // the largest stored record a response may carry
	batchGetBytes int64
	conns         *connRegistry
	// storedSize is a record's stored size when the reader's cache knows
	// it (shard.Reader.StoredSize); nil: unknown.
	storedSize func(shard, id string) (int64, bool)

	admitted []string // the services registered through registrar
}

func newAdmission(cfg Config, g *guard, log *zap.Logger) *admission {
	a := &admission{
		budget:      newBudget(cfg.RequestBudgetBytes, cfg.RequestBudgetBytes/connShareDivisor, cfg.RequestBudgetBytes/identityShareDivisor),
		maxMessage:  int64(cfg.MaxMessageBytes),
		recvTimeout: cfg.RecvTimeout,
		sendTimeout: cfg.SendTimeout,
		sendTimeouts: newCounter("rolloutd_send_timeouts_total",
			"Responses not taken by their client within the send timeout (--send-timeout); each closed its connection."),
		maxRecord:     int64(cfg.MaxRecordBytes) + storedRecordGrowth,
		batchGetBytes: int64(cfg.BatchGetBytes),
		conns:         newConnRegistry(),
		authz:         cfg.Authorizer,
		guard:         g,
		log:           log,
		refused: newCounterVec("rolloutd_admission_refusals_total",
			"Requests refused before or as their message was read, by reason: budget, connection_share, identity_share (the request memory budget), recv_timeout (the message did not arrive in time), no_grants (the caller may not use the method or the shard it names).",
			"reason"),
	}
	for _, r := range []string{refusedServer, refusedConnection, refusedIdentity, refusedRecvTimeout, refusedNoGrants} {
		a.refused.WithLabelValues(r)
	}
	a.gauges = []prometheus.Collector{
		newGaugeFunc("rolloutd_request_budget_bytes",
			"The request memory budget: bytes that requests in flight may hold (--request-budget-bytes).",
			func() float64 { return float64(a.budget.limit) }),
		newGaugeFunc("rolloutd_request_budget_in_use_bytes",
			"Bytes of the request memory budget that requests in flight hold now.",
			func() float64 { return float64(a.budget.inUse()) }),
	}
	return a
}

func (a *admission) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{a.refused, a.sendTimeouts}, a.gauges...)
}

// options are the gRPC server options that admit requests.
func (a *admission) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StatsHandler(connTagger{conns: a.conns}),
		grpc.InTapHandle(a.tap),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
	}
}

// tap admits a stream when its headers arrive (see above). It runs on the
// connection's reader goroutine, under the transport's lock: it must not
// block.
func (a *admission) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	identity := peerIdentity(ctx)
	if err := a.authorizeEarly(ctx, identity, info); err != nil {
		return nil, err
	}
	conn, _ := ctx.Value(connKey{}).(*connUsage)
	if conn == nil {
		conn = &connUsage{} // not served through connTagger: a share of its own
	}
	key := ClientOf(ctx)
	overhead := int64(streamWindow)
	for k, vs := range info.Header {
		for _, v := range vs {
			overhead += int64(len(k) + len(v) + headerFieldOverhead)
		}
	}
	if err := a.budget.charge(conn, key, overhead); err != nil {
		return nil, a.refuse(ctx, err)
	}
	// The reservation and the context that carries it live and die
	// together: one allocation for both.
	st := &admittedState{}
	r := &st.r
	r.a, r.budget, r.conn, r.identity, r.overhead, r.held, r.holds = a, a.budget, conn, key, overhead, overhead, 1
	inner, cancel := context.WithCancelCause(ctx)
	r.cancel = cancel
	r.timer = time.AfterFunc(a.recvTimeout, r.timeout)
	// Under mu: if the stream has already ended, streamEnded runs at once
	// and needs unwatch.
	r.mu.Lock()
	r.unwatch = context.AfterFunc(inner, r.streamEnded)
	r.mu.Unlock()
	st.c = admittedContext{Context: inner, r: r}
	return &st.c, nil
}

// admittedState is a stream's reservation and its context, allocated
// together by the tap.
type admittedState struct {
	r reservation
	c admittedContext
}

// authorizeEarly refuses, under a policy, a RolloutService call from an
// identity that has no grant at all, or whose rolloutd-shard header names a
// shard it may not use the method on. Anything else passes, to the guard.
func (a *admission) authorizeEarly(ctx context.Context, identity string, info *tap.Info) error {
	if a.authz == nil || !strings.HasPrefix(info.FullMethodName, rolloutPrefix) {
		return nil
	}
	verb := methodVerbs[info.FullMethodName]
	var err error
	shardName := ""
	if !a.authz.HasAnyGrant(identity) {
		err = fmt.Errorf("%w: identity %q has no grant in the authorization policy: no %s on any shard", authz.ErrDenied, identity, verb)
	} else if vs := info.Header.Get(ShardHeader); len(vs) > 0 && verb != "" {
		shardName = vs[0]
		if e := a.authz.Authorize(identity, verb, shardName); errors.Is(e, authz.ErrDenied) {
			err = e
		}
	}
	if err == nil {
		return nil
	}
	a.refused.WithLabelValues(refusedNoGrants).Inc()
	a.guard.denied.WithLabelValues(string(verb)).Inc()
	a.log.Info("rpc denied before its body", zap.String("identity", identity), zap.String("verb", string(verb)),
		clientString("shard_header", shardName), zap.String("peer", peerAddr(ctx)))
	return toStatus(ctx, err)
}

// refuse counts an over-budget refusal and returns its status.
func (a *admission) refuse(ctx context.Context, err error) error {
	a.countRefusal(err)
	return toStatus(ctx, err)
}

// countRefusal counts an over-budget refusal.
func (a *admission) countRefusal(err error) {
	reason := refusedServer
	var oe *OverBudgetError
	if errors.As(err, &oe) {
		switch oe.Share {
		case shareConnection:
			reason = refusedConnection
		case shareIdentity:
			reason = refusedIdentity
		}
	}
	a.refused.WithLabelValues(reason).Inc()
}

// decodedCost is what a request message costs once decoded.
func decodedCost(m any) int64 {
	pm, ok := m.(proto.Message)
	if !ok {
		return -1 // unknown: keep the charge
	}
	return decodedCostFactor * int64(proto.Size(pm))
}
