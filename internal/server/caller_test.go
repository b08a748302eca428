package server

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// Who a call comes from is its connection's peer, the same for each call
// on it: it is worked out on the connection's first call, and later calls
// find it without building a string. A call off a connection still gets
// its own answer.
func TestCallerOncePerConnection(t *testing.T) {
	onConn := func(port int) context.Context {
		ctx := connTagger{}.TagConn(context.Background(), &stats.ConnTagInfo{})
		return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: port}})
	}
	a, b := onConn(40000), onConn(40001)
	for _, ctx := range []context.Context{a, b} {
		if got := ClientOf(ctx); got != "addr:10.0.0.7" {
			t.Fatalf("ClientOf: %q, want addr:10.0.0.7", got)
		}
		if got := peerIdentity(ctx); got != "" {
			t.Fatalf("peerIdentity without a certificate: %q", got)
		}
	}
	// Before the fix: 4 allocations per call (the peer's address and
	// "addr:" + its host, built twice).
	if allocs := testing.AllocsPerRun(100, func() { ClientOf(a); peerIdentity(a) }); allocs != 0 {
		t.Errorf("ClientOf and peerIdentity on a connection's later calls: %v allocations, want 0", allocs)
	}
	off := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 8), Port: 1}})
	if got := ClientOf(off); got != "addr:10.0.0.8" {
		t.Errorf("ClientOf off a connection: %q, want addr:10.0.0.8", got)
	}
}
