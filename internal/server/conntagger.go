package server

import (
	"context"

	"google.golang.org/grpc/stats"
)

// connTagger gives every connection its share of the budget, in the context
// its streams derive from, and the means to close it (connRegistry). When
// the connection ends, it releases what its responses still hold.
type connTagger struct{ conns *connRegistry }

type connKey struct{}

func (t connTagger) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	c := &connUsage{}
	if t.conns != nil {
		c.close = t.conns.closer(info.RemoteAddr, info.LocalAddr)
	}
	return context.WithValue(ctx, connKey{}, c)
}

func (connTagger) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); !ok {
		return
	}
	if c, ok := ctx.Value(connKey{}).(*connUsage); ok {
		c.end()
	}
}
func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (connTagger) HandleRPC(context.Context, stats.RPCStats) {}
