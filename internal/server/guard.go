package server

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	_ shardRequest = (*rolloutv1.DescribeShardRequest)(nil)
	_ shardRequest = (*rolloutv1.BatchGetRequest)(nil)
	_ shardRequest = (*rolloutv1.DeleteShardRequest)(nil)

	_ prefixRequest = (*rolloutv1.ListShardsRequest)(nil)
	_ prefixRequest = (*rolloutv1.SubscribeRequest)(nil)
	_ prefixRequest = (*rolloutv1.CommitConsumerRequest)(nil)
	_ prefixRequest = (*rolloutv1.DescribeConsumerRequest)(nil)
	_ prefixRequest = (*rolloutv1.ListConsumersRequest)(nil)
	_ prefixRequest = (*rolloutv1.ResetConsumerRequest)(nil)
	_ prefixRequest = (*rolloutv1.DeleteConsumerRequest)(nil)
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
	// The shard lifecycle (lifecycle.go). ListShards names a prefix, not a
	// shard: the guard lets through a caller with any list grant, and the
	// handler leaves out the shards it may not list.
	rolloutPrefix + "ListShards":    authz.List,
	rolloutPrefix + "DescribeShard": authz.Describe,
	rolloutPrefix + "BatchGet":      authz.Get,
	rolloutPrefix + "DeleteShard":   authz.Delete,
	// Subscribe reads every shard under its prefix: the caller needs scan
	// on the whole prefix (wholePrefix), re-checked while the stream is
	// open.
	rolloutPrefix + "Subscribe": authz.Scan,
	// Consumers (consumers.go) are named by a prefix. Their verbs are
	// checked on the whole prefix (wholePrefix), except ListConsumers',
	// whose handler leaves out the consumers the caller may not scan.
	rolloutPrefix + "CommitConsumer":   authz.Consume,
	rolloutPrefix + "ResetConsumer":    authz.Consume,
	rolloutPrefix + "DeleteConsumer":   authz.Consume,
	rolloutPrefix + "DescribeConsumer": authz.Scan,
	rolloutPrefix + "ListConsumers":    authz.Scan,
}

// wholePrefix are the methods whose verb must be granted on the request's
// whole prefix: a consumer's positions are those of every shard under it,
// so team-a's grant cannot reset team-b's consumer, nor the consumer of
// every shard (prefix "", which needs a grant of "*"); a subscription
// reads every shard under its prefix.
var wholePrefix = map[string]bool{
	rolloutPrefix + "CommitConsumer":   true,
	rolloutPrefix + "ResetConsumer":    true,
	rolloutPrefix + "DeleteConsumer":   true,
	rolloutPrefix + "DescribeConsumer": true,
	rolloutPrefix + "Subscribe":        true,
}

// prefixRequest is a request that names a shard prefix rather than one
// shard (ListShards).
type prefixRequest interface{ GetPrefix() string }

// guard applies the authorization policy, the client CAs in force and the
// append rate limit to RolloutService calls, before the handler runs: a
// refused call touches no writer and no storage. Other services (health,
// reflection) pass: they read no shard.
//
// It also keeps the open guarded streams (a follow Scan can live as long as
// its connection) and re-checks them whenever the policy or the client CAs
// are reloaded: a stream no longer allowed is ended with PERMISSION_DENIED.
// Unary calls are not re-checked: a deadline bounds them.
type guard struct {
	authz   *authz.Authorizer // nil: every client that got through TLS may call
	trust   *clientTrust      // nil: the handshake's verdict on the client stands
	limiter appendLimiter     // nil: no limit
	log     *zap.Logger       // sampled
	events  *zap.Logger       // not sampled: stream revocations
	denied  *prometheus.CounterVec
	revoked *prometheus.CounterVec
	limited prometheus.Counter

	mu          sync.Mutex
	open        map[*guardedStream]struct{} // streams whose first message passed
	unsubscribe []func()                    // reload subscriptions, until close
}

// appendLimiter is *ratelimit.Limiter.
type appendLimiter interface {
	Take(identity string, n int) error
}

func newGuard(cfg Config, log *zap.Logger) *guard {
	if log == nil {
		log = zap.NewNop()
	}
	events := cfg.Logger
	if events == nil {
		events = zap.NewNop()
	}
	g := &guard{
		authz:  cfg.Authorizer,
		log:    log,
		events: events,
		open:   map[*guardedStream]struct{}{},
		denied: newCounterVec("rolloutd_rpc_denied_total",
			"RolloutService calls refused by the authorization policy, by verb.", "verb"),
		revoked: newCounterVec("rolloutd_streams_revoked_total",
			"Open RolloutService streams ended because a reloaded policy or client CA bundle no longer allows them, by verb.", "verb"),
		limited: newCounter("rolloutd_append_rate_limited_total",
			"Appends refused by the per-identity append rate limit."),
	}
	for _, v := range authz.Verbs {
		// Exported at 0 from the start, so that alerts on increase() see
		// the first refusal and the first revocation.
		g.denied.WithLabelValues(string(v))
		g.revoked.WithLabelValues(string(v))
	}
	if cfg.AppendLimiter != nil {
		g.limiter = cfg.AppendLimiter
	}
	if cfg.ClientCAs != nil {
		g.trust = newClientTrust(cfg.ClientCAs)
	}
	return g
}

// subscribe starts re-checking the open streams on every reload of the
// policy and of the client CAs, until close. The callbacks run on the
// reloading goroutine (the file watcher's): the guard starts none.
func (g *guard) subscribe(cas ClientCAs) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.authz != nil {
		g.unsubscribe = append(g.unsubscribe, g.authz.OnReload(func() { g.recheck(false) }))
	}
	if g.trust != nil {
		g.unsubscribe = append(g.unsubscribe, cas.OnReload(func() {
			g.trust.reset()
			g.recheck(true)
		}))
	}
}

// close stops the re-checks. The open streams stay open.
func (g *guard) close() {
	g.mu.Lock()
	unsubscribe := g.unsubscribe
	g.unsubscribe = nil
	g.mu.Unlock()
	for _, f := range unsubscribe {
		f()
	}
}

func (g *guard) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.denied, g.revoked, g.limited}
}

// active reports whether calls to method need checking, and with which
// verb. ok is false for a RolloutService method without a verb.
func (g *guard) active(method string) (verb authz.Verb, check, ok bool) {
	if !strings.HasPrefix(method, rolloutPrefix) {
		return "", false, true
	}
	verb, ok = methodVerbs[method]
	check = g.authz != nil || g.trust != nil || (g.limiter != nil && verb == authz.Append)
	return verb, check, ok || g.authz == nil
}

// check decides one request message of method with verb, from the peer in
// ctx. The error is a gRPC status.
func (g *guard) check(ctx context.Context, method string, verb authz.Verb, msg any) error {
	if pr, ok := msg.(prefixRequest); ok {
		return g.checkPrefix(ctx, verb, pr, wholePrefix[method])
	}
	r, ok := msg.(shardRequest)
	if !ok {
		return toStatus(ctx, fmt.Errorf("%w: %s: the request names no shard", authz.ErrDenied, method))
	}
	identity := peerIdentity(ctx)
	if g.trust != nil {
		if chain := peerChain(ctx); len(chain) > 0 {
			if err := g.trust.verify(chain); err != nil {
				g.denied.WithLabelValues(string(verb)).Inc()
				g.log.Info("rpc denied", zap.String("identity", identity), zap.String("verb", string(verb)),
					zap.String("shard", r.GetShard()), zap.String("peer", peerAddr(ctx)), zap.Error(err))
				return toStatus(ctx, untrusted(identity, err, false))
			}
		}
	}
	if g.authz != nil {
		if err := g.authz.Authorize(identity, verb, r.GetShard()); err != nil {
			if status.Code(toStatus(ctx, err)) == codes.PermissionDenied {
				g.denied.WithLabelValues(string(verb)).Inc()
				g.log.Info("rpc denied", clientString("identity", identity), zap.String("verb", string(verb)),
					clientString("shard", r.GetShard()), zap.String("peer", peerAddr(ctx)))
			}
			return toStatus(ctx, err)
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
			return toStatus(ctx, err)
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
//
// Once a message has passed, the stream is registered with the guard until
// the handler returns, and re-checked on every reload of the policy or the
// client CAs. A stream no longer allowed is revoked: its context is
// cancelled with the refusal as the cause, it sends nothing more, and the
// stream ends with that refusal (PERMISSION_DENIED) whatever the handler
// returns.
func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	verb, check, ok := g.active(info.FullMethod)
	if !ok {
		return g.uncovered(info.FullMethod)
	}
	if !check {
		return handler(srv, ss)
	}
	ctx, cancel := context.WithCancelCause(ss.Context())
	gs := &guardedStream{ServerStream: ss, g: g, ctx: ctx, cancel: cancel, method: info.FullMethod, verb: verb,
		identity: peerIdentity(ctx), chain: peerChain(ctx)}
	defer g.unregister(gs)
	err := handler(srv, gs)
	if rerr := gs.revocation(); rerr != nil && err != nil {
		return rerr
	}
	return err
}

func (g *guard) uncovered(method string) error {
	ctx := context.Background() // a refusal before any work: no deadline is involved
	return toStatus(ctx, fmt.Errorf("%w: %s has no authorization verb, so no policy can allow it", authz.ErrDenied, method))
}

// tracks reports whether streams are registered for re-checks: only when
// something can be reloaded that would revoke them.
func (g *guard) tracks() bool { return g.authz != nil || g.trust != nil }

// register records that s's message for shard passed.
func (g *guard) register(s *guardedStream, shard string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.shards = append(s.shards, shard)
	g.open[s] = struct{}{}
}

// unregister forgets s: its handler returned.
func (g *guard) unregister(s *guardedStream) {
	g.mu.Lock()
	delete(g.open, s)
	g.mu.Unlock()
	s.cancel(context.Canceled)
}

// recheck re-checks every open stream against the policy in force and,
// with verifyChains, its client's chain against the client CAs in force,
// and revokes the streams no longer allowed.
func (g *guard) recheck(verifyChains bool) {
	g.mu.Lock()
	open := make([]*guardedStream, 0, len(g.open))
	for s := range g.open {
		open = append(open, s)
	}
	g.mu.Unlock()
	ended := 0
	for _, s := range open {
		if g.recheckOne(s, verifyChains) {
			ended++
		}
	}
	g.events.Info("open streams re-checked", zap.Bool("client_cas", verifyChains), zap.Int("streams", len(open)), zap.Int("revoked", ended))
}

// recheckOne re-checks s and revokes it if it is no longer allowed. It
// reports whether it revoked s.
func (g *guard) recheckOne(s *guardedStream, verifyChain bool) bool {
	g.mu.Lock()
	shards := s.shards
	g.mu.Unlock()
	var err error
	if verifyChain && g.trust != nil && len(s.chain) > 0 {
		if verr := g.trust.verify(s.chain); verr != nil {
			err = untrusted(s.identity, verr, true)
		}
	}
	if err == nil && g.authz != nil {
		p := g.authz.Policy()
		for _, shard := range shards {
			if !p.Allows(s.identity, s.verb, shard) {
				err = &authz.DeniedError{Identity: s.identity, Verb: s.verb, Shard: shard, Revoked: true}
				break
			}
		}
	}
	if err == nil {
		return false
	}
	st := toStatus(s.Context(), err)
	if !s.revoke(st) {
		return false
	}
	g.events.Info("stream revoked", zap.String("method", s.method), zap.String("identity", s.identity),
		zap.Strings("shards", shards), zap.String("peer", peerAddr(s.ctx)), zap.Error(err))
	return true
}

// untrusted is the refusal of a client whose certificate the client CAs in
// force no longer trust (cause says why). stream: an open stream is being
// ended.
func untrusted(identity string, cause error, stream bool) error {
	then := "reconnect with a certificate they trust"
	if stream {
		then = "the stream is ended"
	}
	return fmt.Errorf("%w: the client certificate of identity %q is not trusted by the client CAs now in force (%v); %s", authz.ErrDenied, identity, cause, then)
}

// checkPrefix decides a request that names a prefix (ListShards, the
// consumers): the caller needs a grant of verb on some shard, and which
// shards it sees is the handler's to filter; with whole, a grant of verb
// on the whole prefix. The client CAs in force apply as to every call.
func (g *guard) checkPrefix(ctx context.Context, verb authz.Verb, r prefixRequest, whole bool) error {
	identity := peerIdentity(ctx)
	if g.trust != nil {
		if chain := peerChain(ctx); len(chain) > 0 {
			if err := g.trust.verify(chain); err != nil {
				g.denied.WithLabelValues(string(verb)).Inc()
				return toStatus(ctx, untrusted(identity, err, false))
			}
		}
	}
	if whole && g.authz != nil {
		if err := g.authz.AuthorizePrefix(identity, verb, r.GetPrefix()); err != nil {
			if status.Code(toStatus(ctx, err)) == codes.PermissionDenied {
				g.denied.WithLabelValues(string(verb)).Inc()
				g.log.Info("rpc denied", clientString("identity", identity), zap.String("verb", string(verb)),
					clientString("prefix", r.GetPrefix()), zap.String("peer", peerAddr(ctx)))
			}
			return toStatus(ctx, err)
		}
		return nil
	}
	if g.authz != nil && !g.authz.AllowsAny(identity, verb) {
		g.denied.WithLabelValues(string(verb)).Inc()
		g.log.Info("rpc denied", clientString("identity", identity), zap.String("verb", string(verb)),
			clientString("prefix", r.GetPrefix()), zap.String("peer", peerAddr(ctx)))
		if identity == "" {
			return toStatus(ctx, &authz.DeniedError{Verb: verb, Shard: r.GetPrefix()})
		}
		return toStatus(ctx, fmt.Errorf("%w: identity %q may not %s any shard: no grant of the authorization policy allows it", authz.ErrDenied, identity, verb))
	}
	return nil
}

// scopeOf is what a stream's request that passed the guard acts on, as
// the guard re-checks it: its shard, or the prefix (without a trailing
// '/'; "*" for every shard) of a Subscribe, which acts on every shard
// under it.
func scopeOf(msg any) string {
	if r, ok := msg.(shardRequest); ok {
		return r.GetShard()
	}
	if r, ok := msg.(prefixRequest); ok {
		if p := strings.TrimSuffix(r.GetPrefix(), "/"); p != "" {
			return p
		}
		return authz.AllShards
	}
	return ""
}
