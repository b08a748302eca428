package server

import (
	"context"
	"crypto/x509"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/rolloutd/rolloutd/internal/authz"
)

// peerIdentity is the identity of the client certificate verified on the
// connection ctx belongs to, or "" when there is none (plaintext, or TLS
// without client authentication).
func peerIdentity(ctx context.Context) string {
	if c := connCaller(ctx); c != nil {
		return c.identity
	}
	return identityOf(ctx)
}

// identityOf is peerIdentity, worked out from ctx's peer.
func identityOf(ctx context.Context) string {
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

// peerChain is the certificate chain the client presented on the
// connection ctx belongs to (leaf first), or nil when there is none.
func peerChain(ctx context.Context) []*x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		return ti.State.PeerCertificates
	}
	return nil
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
