package server

import (
	"errors"
	"math"
	"net"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Connection limits: what one client connection may hold or do. Each bounds
// a way that one misbehaving client could starve the others.
const (
	// DefaultMaxConcurrentStreams bounds the RPCs in flight on one
	// connection; a client that wants more waits for a slot (gRPC clients
	// queue on their side) or opens another connection. Each stream holds
	// at least its 64 KiB window of the request budget: 256 of them, 16
	// MiB, leave most of a pod's connection share (about 135 MiB, see
	// docs/operations.md, "Memory") to request bodies.
	DefaultMaxConcurrentStreams = 256
	// DefaultKeepaliveMinTime is the shortest interval at which a client may
	// ping. Pinging more often is a protocol violation: after three such
	// pings the server answers GOAWAY "too_many_pings" and closes the
	// connection. gRPC clients never ping more often than every 10 s.
	DefaultKeepaliveMinTime = 10 * time.Second
	// DefaultMaxConnectionAge is roughly how long a connection lives
	// (gRPC adds ±10% jitter) before the server asks the client to
	// reconnect, so that clients re-resolve and spread over instances added
	// since they connected.
	DefaultMaxConnectionAge = 10 * time.Minute
	// DefaultMaxConnectionAgeGrace is how long RPCs in flight get to finish
	// after that request; a stream still open then is cut, and a Scan
	// resumes from its last cursor.
	DefaultMaxConnectionAgeGrace = time.Minute
	// handshakeTimeout bounds a new connection's TLS and HTTP/2 handshake,
	// so that connections that never complete one do not pile up.
	handshakeTimeout = 20 * time.Second
	// healthMaxMessageBytes bounds requests on the health-only listener: a
	// health check is a service name.
	healthMaxMessageBytes = 4 << 10
	// healthMaxStreams bounds RPCs per connection on the health-only
	// listener.
	healthMaxStreams = 16
)

func (c Config) withConnDefaults() Config {
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if c.KeepaliveMinTime == 0 {
		c.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	if c.MaxConnectionAge == 0 {
		c.MaxConnectionAge = DefaultMaxConnectionAge
	}
	if c.MaxConnectionAgeGrace == 0 {
		c.MaxConnectionAgeGrace = DefaultMaxConnectionAgeGrace
	}
	return c
}

func (c Config) validateConn() error {
	if c.KeepaliveMinTime < 0 || c.MaxConnectionAgeGrace < 0 {
		return errors.New("server: KeepaliveMinTime and MaxConnectionAgeGrace must not be negative")
	}
	return nil
}

// keepalivePolicy is what the server enforces on client pings.
func (c Config) keepalivePolicy() keepalive.EnforcementPolicy {
	return keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinTime, PermitWithoutStream: c.KeepalivePermitWithoutStream}
}

// connOptions are the gRPC options that bound one connection.
func (c Config) connOptions() []grpc.ServerOption {
	params := keepalive.ServerParameters{
		MaxConnectionAge:      c.MaxConnectionAge,
		MaxConnectionAgeGrace: c.MaxConnectionAgeGrace,
	}
	if c.MaxConnectionAge < 0 {
		params.MaxConnectionAge = time.Duration(math.MaxInt64)
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(c.keepalivePolicy()),
		grpc.KeepaliveParams(params),
		grpc.ConnectionTimeout(handshakeTimeout),
	}
}

// newHealthOnly builds the health-only gRPC server: grpc.health.v1 over hs
// (the main server's, so it reports the same status and goes NOT_SERVING on
// Shutdown), with small limits, and nothing else. It is meant for a
// plaintext listener that kubelet's gRPC probes can reach when the main
// listener requires client certificates; it exposes only the status.
//
// No reflection: it describes every symbol linked into the binary (ask for
// the file containing rollout.v1.RolloutService, and it is there), not only
// the services registered here. Probes need none; people check the port
// with grpc-health-probe, or grpcurl given the health proto (see
// docs/operations.md).
func newHealthOnly(c Config, hs *health.Server) *grpc.Server {
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(healthMaxMessageBytes),
		grpc.MaxConcurrentStreams(healthMaxStreams),
		grpc.KeepaliveEnforcementPolicy(c.keepalivePolicy()),
		grpc.ConnectionTimeout(handshakeTimeout),
	)
	healthpb.RegisterHealthServer(g, hs)
	return g
}

// ServeHealth serves only grpc.health.v1 on lis, in plaintext, until
// Shutdown: for kubelet's gRPC probes, which present no client
// certificate. It returns nil after Shutdown.
func (s *Server) ServeHealth(lis net.Listener) error {
	s.log.Info("serving health", zap.String("addr", lis.Addr().String()))
	return s.healthOnly.Serve(lis)
}
