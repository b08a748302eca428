package client

import (
	// Registers the ring_hash_experimental load-balancing policy that
	// ServiceConfig names; without it grpc.NewClient rejects the config.
	_ "google.golang.org/grpc/balancer/ringhash"
)

// ShardHeader is the request header (gRPC metadata key) that carries a
// call's shard. Every call sets it; with WithAffinity(true), ring_hash
// hashes its value to pick the server.
const ShardHeader = "rolloutd-shard"

// ServiceConfig is the channel's gRPC service config with WithAffinity(true):
// ring_hash on ShardHeader, and nothing else. It sets no retryPolicy: the
// client resends by the server's ErrorInfo reason itself, and two retry
// layers would stack. It is the same document as
// deploy/client/service-config.json, for clients in other languages; a
// test keeps the two equal.
//
// In grpc-go v1.85 the requestHashHeader field is honoured unless the
// environment sets GRPC_EXPERIMENTAL_RING_HASH_SET_REQUEST_HASH_KEY=false;
// with it off, every call fails ("expected xDS config selector to set the
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
  ]
}`
