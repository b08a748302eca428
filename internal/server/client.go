package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/peer"
)

// ClientOf is who a call comes from, for the shares of the memory budget
// and for anything else kept per client (log sampling): the identity of
// its verified client certificate under mTLS, else "addr:" and the peer's
// IP address. Without mTLS a client is its address, not its connection:
// one that opens more connections gets no larger share. Clients behind one
// NAT or L7 proxy share one address, and so one share; give them
// certificates to tell them apart.
func ClientOf(ctx context.Context) string {
	if c := connCaller(ctx); c != nil {
		return c.client
	}
	return clientOf(ctx, identityOf(ctx))
}

// clientOf is ClientOf for the call's peer identity.
func clientOf(ctx context.Context, identity string) string {
	if identity != "" {
		return identity
	}
	return "addr:" + peerHost(ctx)
}

// caller is who a connection's calls come from. A connection's peer (its
// address, its verified certificate) is the same for each of its calls, so
// the strings naming it are built once, on its first call, not on every
// call: under mTLS, every call asks for its identity three times.
type caller struct {
	once     sync.Once
	identity string // peerIdentity
	client   string // ClientOf
}

// connCaller is the caller of the connection ctx's call came on; nil when
// ctx has no connection (not served through connTagger) or no peer.
func connCaller(ctx context.Context) *caller {
	u, ok := ctx.Value(connKey{}).(*connUsage)
	if !ok {
		return nil
	}
	if _, ok := peer.FromContext(ctx); !ok {
		return nil
	}
	u.who.once.Do(func() {
		u.who.identity = identityOf(ctx)
		u.who.client = clientOf(ctx, u.who.identity)
	})
	return &u.who
}
