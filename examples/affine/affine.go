// Package affine is a rolloutd client that routes every request for a shard
// to the same rolloutd pod, with stock gRPC and no proxy.
//
// rolloutd keeps one resident writer per shard. Two pods writing the same
// shard fence each other: every switch costs the loser a failed commit and a
// reopen (an epoch claim) before its appends go through. Correctness never
// depends on routing, but throughput and tail latency do. This package makes
// routing shard-affine:
//
//   - dial the headless Service through the dns:/// resolver, so the client
//     sees one address per ready pod (DefaultTarget);
//   - balance with gRPC's ring_hash policy, keyed on the ShardHeader request
//     header (ServiceConfig, the same document as
//     deploy/client/service-config.json);
//   - set that header from each request's shard (UnaryShardInterceptor for
//     Append and Get, WithShard for the Scan stream).
//
// A pod that joins or leaves moves only the shards on its arcs of the ring.
// Retries of UNAVAILABLE are in the service config; they resend the same
// message, so records keep their ids and a retried Append is idempotent.
// UnaryRequestIDInterceptor gives every Append without a request_id a fresh
// one before the first attempt, so that records without an id get the same
// server-derived ids on every attempt too.
//
// See docs/routing.md.
package affine

import (
	"context"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	// Registers the ring_hash_experimental load-balancing policy that
	// ServiceConfig names; without this import grpc.NewClient rejects it.
	_ "google.golang.org/grpc/balancer/ringhash"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// ShardHeader is the request header (gRPC metadata key) that carries the
// shard; ring_hash hashes its value to pick the pod.
const ShardHeader = "rolloutd-shard"

// DefaultTarget is the headless Service of deploy/k8s, in the namespace the
// base uses, through the DNS resolver (one address per ready pod).
const DefaultTarget = "dns:///rolloutd-headless.rolloutd.svc.cluster.local:50051"

// MaxMessageBytes bounds one request or response, and the bytes a call
// buffers for transparent retries: gRPC's default retry buffer is 256 KiB,
// and an Append larger than the buffer is not retried by the channel at all.
// Keep it no larger than the server's --max-message-bytes.
const MaxMessageBytes = 64 << 20

// ServiceConfig is the client's gRPC service config: ring_hash on
// ShardHeader, and retries of UNAVAILABLE (fenced after self-heal, a pod
// shutting down, storage throttled) with backoff. It is the same document as
// deploy/client/service-config.json; a test keeps the two equal.
//
// In grpc-go v1.85 the requestHashHeader field is honoured unless the
// environment sets GRPC_EXPERIMENTAL_RING_HASH_SET_REQUEST_HASH_KEY=false;
// with it off, every RPC fails ("expected xDS config selector to set the
// request hash").
const ServiceConfig = `{
  "loadBalancingConfig": [
    {
      "ring_hash_experimental": {
        "minRingSize": 1024,
        "maxRingSize": 4096,
        "requestHashHeader": "rolloutd-shard"
      }
    }
  ],
  "methodConfig": [
    {
      "name": [
        {
          "service": "rollout.v1.RolloutService"
        }
      ],
      "retryPolicy": {
        "maxAttempts": 5,
        "initialBackoff": "0.2s",
        "maxBackoff": "5s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": [
          "UNAVAILABLE"
        ]
      }
    }
  ],
  "retryThrottling": {
    "maxTokens": 100,
    "tokenRatio": 0.1
  }
}`

// NewClient creates a shard-affine connection to rolloutd at target (usually
// DefaultTarget). Pass transport credentials in opts, for example
// grpc.WithTransportCredentials(insecure.NewCredentials()) inside the
// cluster; later options override the defaults set here.
func NewClient(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	defaults := []grpc.DialOption{
		grpc.WithDefaultServiceConfig(ServiceConfig),
		grpc.WithChainUnaryInterceptor(UnaryShardInterceptor, UnaryRequestIDInterceptor),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(MaxMessageBytes),
			grpc.MaxCallRecvMsgSize(MaxMessageBytes),
			grpc.MaxRetryRPCBufferSize(MaxMessageBytes),
		),
	}
	return grpc.NewClient(target, append(defaults, opts...)...)
}

// WithShard returns ctx carrying the ShardHeader for shard. The unary
// interceptor sets it for Append and Get; a streaming call such as Scan opens
// its stream (and picks its pod) before the request is sent, so pass the
// shard this way:
//
//	stream, err := client.Scan(affine.WithShard(ctx, req.GetShard()), req)
//
// A following Scan on the shard's own pod wakes on each commit at once;
// on another pod it polls the manifest (up to 2 s apart).
func WithShard(ctx context.Context, shard string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, ShardHeader, shard)
}

// shardRequest is implemented by rollout.v1's AppendRequest, GetRequest and
// ScanRequest.
type shardRequest interface {
	GetShard() string
}

// UnaryShardInterceptor sets ShardHeader to the request's shard, unless the
// caller already set it, so that ring_hash picks the shard's pod.
func UnaryShardInterceptor(ctx context.Context, method string, req, reply any,
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(shardRequest); ok && r.GetShard() != "" {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(ShardHeader)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, ShardHeader, r.GetShard())
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// UnaryRequestIDInterceptor sends an AppendRequest without a request_id as
// a copy with a fresh UUID as its request_id; the caller's request is not
// modified, and its records are not copied. It runs once per call, before the channel's transparent
// retries, which resend that same copy: every attempt then carries the
// same request_id, and records sent without an id get the same
// server-derived ids, so a retry of a committed attempt comes back
// already_present instead of storing them again. A request_id the caller
// set is kept; set one yourself to make your own retries (a new call with
// the same request) idempotent as well.
func UnaryRequestIDInterceptor(ctx context.Context, method string, req, reply any,
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*rolloutv1.AppendRequest); ok && r.GetRequestId() == "" {
		with := shallowCopy(r)
		with.RequestId = uuid.NewString()
		req = with
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// shallowCopy returns a new AppendRequest with every field of r, sharing
// r's records rather than copying them (a batch may be tens of MiB). The
// copy is only marshalled, never modified.
func shallowCopy(r *rolloutv1.AppendRequest) *rolloutv1.AppendRequest {
	out := &rolloutv1.AppendRequest{}
	src, dst := r.ProtoReflect(), out.ProtoReflect()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	return out
}
