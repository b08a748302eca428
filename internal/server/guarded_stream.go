package server

import (
	"context"
	"crypto/x509"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/internal/authz"
)

// guardedStream checks every message the handler receives, and can be
// revoked while it is open.
type guardedStream struct {
	grpc.ServerStream
	g        *guard
	ctx      context.Context         // the stream's; cancelled with the revocation as cause
	cancel   context.CancelCauseFunc // of ctx
	method   string
	verb     authz.Verb
	identity string              // tagged; "" without a client certificate
	chain    []*x509.Certificate // as the client presented it; nil without one

	// Used only by the handler's goroutine.
	passed bool  // a message was allowed
	err    error // a message was refused: the stream stays refused

	shards   []string              // that passed; guarded by g.mu
	revoking atomic.Bool           // revoke has begun: only the first counts
	revoked  atomic.Pointer[error] // the revocation, a gRPC status error
}

func (s *guardedStream) Context() context.Context { return s.ctx }

// revoke counts the revocation and ends s with err: from now on it
// receives and sends nothing, and its context is cancelled with err as the
// cause. It reports whether s was not revoked before. The count comes
// before the revocation is published (RecvMsg and SendMsg answer with it)
// and before the cancel: whoever sees the stream end must find it counted.
func (s *guardedStream) revoke(err error) bool {
	if !s.revoking.CompareAndSwap(false, true) {
		return false
	}
	s.g.revoked.WithLabelValues(string(s.verb)).Inc()
	s.revoked.Store(&err)
	s.cancel(err)
	return true
}

// revocation is the error s was revoked with, or nil.
func (s *guardedStream) revocation() error {
	if p := s.revoked.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *guardedStream) RecvMsg(m any) error {
	if s.err != nil {
		return s.err
	}
	if err := s.revocation(); err != nil {
		return err
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.g.check(s.ctx, s.method, s.verb, m); err != nil {
		s.err = err
		return err
	}
	if s.g.tracks() {
		// Register, then re-check: a reload that came between the check
		// and the registration, whose re-check missed this stream, is seen
		// here.
		s.g.register(s, scopeOf(m))
		if s.g.recheckOne(s, true) {
			return s.revocation()
		}
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
	if err := s.revocation(); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}
