package server

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
)

// shardRequest is every RolloutService request: each names the one shard it
// acts on. The guard reads the shard through it, so a new RPC needs no
// change here beyond its verb in methodVerbs.
type shardRequest interface{ GetShard() string }

var (
	_ shardRequest = (*rolloutv1.AppendRequest)(nil)
	_ shardRequest = (*rolloutv1.GetRequest)(nil)
	_ shardRequest = (*rolloutv1.ScanRequest)(nil)
)

// rolloutPrefix prefixes the full method names of RolloutService.
var rolloutPrefix = "/" + rolloutv1.RolloutService_ServiceDesc.ServiceName + "/"

// methodVerbs maps each RolloutService method to the verb that authorizes
// it. A RolloutService method missing here is refused under a policy: a new
// RPC stays closed until someone decides which verb it is.
var methodVerbs = map[string]authz.Verb{
	rolloutPrefix + "Append": authz.Append,
	rolloutPrefix + "Get":    authz.Get,
	rolloutPrefix + "Scan":   authz.Scan,
}

// guard applies the authorization policy and the append rate limit to
// RolloutService calls, before the handler runs: a refused call touches no
// writer and no storage. Other services (health, reflection) pass: they
// read no shard.
type guard struct {
	authz   *authz.Authorizer // nil: every client that got through TLS may call
	limiter appendLimiter     // nil: no limit
	log     *zap.Logger       // sampled
	denied  *prometheus.CounterVec
	limited prometheus.Counter
}

// appendLimiter is *ratelimit.Limiter.
type appendLimiter interface {
	Take(identity string, n int) error
}

func newGuard(cfg Config, log *zap.Logger) *guard {
	if log == nil {
		log = zap.NewNop()
	}
	g := &guard{
		authz: cfg.Authorizer,
		log:   log,
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rolloutd_rpc_denied_total",
			Help: "RolloutService calls refused by the authorization policy, by verb.",
		}, []string{"verb"}),
		limited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rolloutd_append_rate_limited_total",
			Help: "Appends refused by the per-identity append rate limit.",
		}),
	}
	if cfg.AppendLimiter != nil {
		g.limiter = cfg.AppendLimiter
	}
	return g
}

func (g *guard) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.denied, g.limited}
}

// active reports whether calls to method need checking, and with which
// verb. ok is false for a RolloutService method without a verb.
func (g *guard) active(method string) (verb authz.Verb, check, ok bool) {
	if !strings.HasPrefix(method, rolloutPrefix) {
		return "", false, true
	}
	verb, ok = methodVerbs[method]
	check = g.authz != nil || (g.limiter != nil && verb == authz.Append)
	return verb, check, ok || g.authz == nil
}

// check decides one request message of method with verb, from the peer in
// ctx. The error is a gRPC status.
func (g *guard) check(ctx context.Context, method string, verb authz.Verb, msg any) error {
	r, ok := msg.(shardRequest)
	if !ok {
		return toStatus(fmt.Errorf("%w: %s: the request names no shard", authz.ErrDenied, method))
	}
	identity := peerIdentity(ctx)
	if g.authz != nil {
		if err := g.authz.Authorize(identity, verb, r.GetShard()); err != nil {
			if status.Code(toStatus(err)) == codes.PermissionDenied {
				g.denied.WithLabelValues(string(verb)).Inc()
				g.log.Info("rpc denied", clientString("identity", identity), zap.String("verb", string(verb)),
					clientString("shard", r.GetShard()), zap.String("peer", peerAddr(ctx)))
			}
			return toStatus(err)
		}
	}
	if g.limiter != nil && verb == authz.Append {
		key := identity
		if key == "" {
			// Without a client certificate the limit is per client
			// address.
			key = "addr:" + peerHost(ctx)
		}
		m, _ := msg.(proto.Message)
		if err := g.limiter.Take(key, proto.Size(m)); err != nil {
			g.limited.Inc()
			return toStatus(err)
		}
	}
	return nil
}

// unary is the guard's unary interceptor.
func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	verb, check, ok := g.active(info.FullMethod)
	if !ok {
		return nil, g.uncovered(info.FullMethod)
	}
	if check {
		if err := g.check(ctx, info.FullMethod, verb, req); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

// stream is the guard's stream interceptor. The shard is in the request
// messages, which arrive after the stream opens, so it checks each message
// as the handler receives it: a refused message ends the stream with the
// refusal before the handler sees it (for a server-streaming RPC such as
// Scan, before the handler is called at all). Until one message has passed,
// the handler cannot send.
func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	verb, check, ok := g.active(info.FullMethod)
	if !ok {
		return g.uncovered(info.FullMethod)
	}
	if !check {
		return handler(srv, ss)
	}
	return handler(srv, &guardedStream{ServerStream: ss, g: g, method: info.FullMethod, verb: verb})
}

func (g *guard) uncovered(method string) error {
	return toStatus(fmt.Errorf("%w: %s has no authorization verb, so no policy can allow it", authz.ErrDenied, method))
}

// guardedStream checks every message the handler receives.
type guardedStream struct {
	grpc.ServerStream
	g      *guard
	method string
	verb   authz.Verb
	passed bool  // a message was allowed
	err    error // a message was refused: the stream stays refused
}

func (s *guardedStream) RecvMsg(m any) error {
	if s.err != nil {
		return s.err
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.g.check(s.Context(), s.method, s.verb, m); err != nil {
		s.err = err
		return err
	}
	s.passed = true
	return nil
}

func (s *guardedStream) SendMsg(m any) error {
	switch {
	case s.err != nil:
		return s.err
	case !s.passed:
		return status.Error(codes.PermissionDenied, "nothing is sent on this stream before its request is authorized")
	}
	return s.ServerStream.SendMsg(m)
}

// peerIdentity is the identity of the client certificate verified on the
// connection ctx belongs to, or "" when there is none (plaintext, or TLS
// without client authentication).
func peerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return authz.Identity(ti.State.VerifiedChains[0][0])
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func peerHost(ctx context.Context) string {
	a := peerAddr(ctx)
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}
