package server

import "context"

// ClientOf is who a call comes from, for the shares of the memory budget
// and for anything else kept per client (log sampling): the identity of
// its verified client certificate under mTLS, else "addr:" and the peer's
// IP address. Without mTLS a client is its address, not its connection:
// one that opens more connections gets no larger share. Clients behind one
// NAT or L7 proxy share one address, and so one share; give them
// certificates to tell them apart.
func ClientOf(ctx context.Context) string {
	if id := peerIdentity(ctx); id != "" {
		return id
	}
	return "addr:" + peerHost(ctx)
}
