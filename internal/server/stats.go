package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"

	"github.com/google/uuid"
	"google.golang.org/grpc/stats"
)

// rpcCall is what the server tracks of one RPC, from before its first
// interceptor to its end. The stats handler creates it, so every RPC has
// one, whatever rejects it.
type rpcCall struct {
	// id names the RPC in the log. A client that gets a generic error
	// (Internal, DataLoss, storage-caused Unavailable) gets this id in the
	// message, and the log line with the details carries it as request_id.
	id string
	// bytesSent is the size of the messages sent on the RPC, before
	// compression; records is the records a Scan sent.
	bytesSent, records atomic.Int64
}

type callKey struct{}

// callFrom returns the RPC's rpcCall; one that the stats handler did not
// tag (a handler called directly in a test) gets a fresh one.
func callFrom(ctx context.Context) *rpcCall {
	if c, ok := ctx.Value(callKey{}).(*rpcCall); ok {
		return c
	}
	return newCall()
}

func newCall() *rpcCall { return &rpcCall{id: newRequestID()} }

// newRequestID returns a UUIDv7: unique, and sorted by time like the log.
func newRequestID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// rpcStats is the server's grpc stats.Handler. It gives every RPC its
// rpcCall before any interceptor runs, and counts what each RPC sends.
type rpcStats struct{}

var _ stats.Handler = rpcStats{}

func (rpcStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, callKey{}, newCall())
}

func (rpcStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok {
		if c, ok := ctx.Value(callKey{}).(*rpcCall); ok {
			c.bytesSent.Add(int64(p.Length))
		}
	}
}

func (rpcStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (rpcStats) HandleConn(context.Context, stats.ConnStats) {}
