package client_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// BenchmarkAppendWrapping is what the client adds to one Append around the
// gRPC call: the request id, the shard header, the retry loop and its
// timeouts, the trace interceptor. An interceptor answers every call
// before the transport, so nothing else is measured.
//
//	go test -run '^$' -bench AppendWrapping -benchmem ./client
func BenchmarkAppendWrapping(b *testing.B) {
	answer := grpc.WithChainUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
		return nil
	})
	c, err := client.New("passthrough:///unused", client.WithDialOptions(answer))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	records := []*rolloutv1.Record{{Id: "a", Content: "x"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Append(ctx, "bench/s", records); err != nil {
			b.Fatal(err)
		}
	}
}
