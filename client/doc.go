// Package client is the Go client of rolloutd: retry-safe appends,
// resumable scans, errors matched with errors.Is, and optional shard
// affinity across rolloutd pods.
//
//	c, err := client.New("localhost:50051")
//	if err != nil { ... }
//	defer c.Close()
//	results, err := c.Append(ctx, "exp-42/actor-7", []*rolloutv1.Record{{Id: "r-1", Content: "4"}})
//	rec, err := c.Get(ctx, "exp-42/actor-7", "r-1")
//	for rec, err := range c.Scan(ctx, "exp-42/actor-7", client.Follow()) { ... }
//
// # Retries
//
// The client owns retries; the channel's service config only balances
// load. Append gives every call a request_id (a UUIDv4, unless
// WithRequestID names one) and resends the same request, request_id
// included, when the server's google.rpc.ErrorInfo reason (domain
// rolloutd.io) says a resend helps: OUTCOME_UNKNOWN, NOT_COMMITTED,
// BACKPRESSURE, and RATE_LIMITED with a RetryInfo; never STORE_FULL (the
// server's disk is full until an operator frees space). A failure without an
// ErrorInfo, such as a connection that broke (UNAVAILABLE) or an attempt
// that ran out of its own timeout (DEADLINE_EXCEEDED), counts as
// OUTCOME_UNKNOWN. Because the request_id is the same on every attempt,
// records without an id get the same server-derived ids each time, and a
// resend of an attempt that was committed after all comes back
// already_present: nothing is stored twice. Get resends on UNAVAILABLE and
// on an attempt's timeout. DeleteShard resends those only with an
// expected last seq, which keeps a resend from deleting records appended
// after its first attempt landed (see DeleteShard). Everything else returns
// at once. See "Errors and retries" in the README for what each reason
// means.
//
// How often and how long: docs/clients.md, one policy with the same
// defaults as the Python client. A call's budget is its context's deadline,
// or DefaultCallTimeout (30 s, WithCallTimeout) without one; it makes at
// most DefaultRetryPolicy.MaxAttempts (8) attempts, each bounded by the
// attempt timeout (10 s, WithAttemptTimeout), with jittered waits of
// 100 ms doubling to 2 s, never shorter than the server's RetryInfo and
// never past the budget. Attempts do not wait for a connection; after one
// that got no answer, the wait ends as soon as the connection is READY
// again, and the connection's own reconnect backoff is capped at 1 s, so a
// restarted server is reached promptly. With the server down a call fails
// after 3.55 s to 7.1 s, with an error such as "server unreachable at
// localhost:50051: 8 attempts over 5.2s: ...".
//
// # Errors
//
// Every error a call returns from the server is an *Error, which carries
// the status code, the ErrorInfo reason, the server's message and its
// RetryInfo and BadRequest details. Match classes with errors.Is:
// ErrNotFound, ErrAlreadyExists, ErrInvalidArgument, ErrPermissionDenied,
// ErrTooLarge, ErrUnavailable, ErrOutcomeUnknown, ErrNotCommitted,
// ErrBackpressure, ErrRateLimited, ErrDataLoss, ErrInternal. An error of
// a call whose context ended also matches context.DeadlineExceeded or
// context.Canceled.
//
// # Scans
//
// Scan yields records, not batches. When its stream breaks with
// UNAVAILABLE (a pod shutting down says where to resume with the ErrorInfo
// reason SCAN_INTERRUPTED and metadata resume_after_seq), it opens a new
// stream after its cursor, so a follower sees every record exactly once.
// WithCursor exposes that cursor for checkpointing.
//
// # Subscriptions
//
// Subscribe reads every shard under a prefix, those created while it runs
// included, as an iterator of batches (Subscription.Batches), each one
// shard's records and the cursor to continue it after. A named consumer
// stores its positions with Subscription.Commit, so that a trainer that
// restarts continues where it committed (at-least-once), and Member of
// Members splits the shards between trainer ranks. When the stream breaks,
// the subscription resumes from the cursors it received, so nothing is
// missed or yielded twice; after a ResetConsumer it ends with
// ErrConsumerReset. See "Subscribing to a prefix" in docs/clients.md.
//
// # Shard affinity
//
// rolloutd keeps one resident writer per shard, and two pods writing one
// shard fence each other. WithAffinity(true) balances with gRPC's
// ring_hash policy keyed on the ShardHeader request header, which every
// call sets to its shard, so that every call for a shard reaches the same
// pod of a headless Service (dial DefaultTarget). A pod that joins or
// leaves moves only the shards on its arcs of the ring. Correctness never
// depends on it: fencing keeps two writers safe. ServiceConfig is the
// same document as deploy/client/service-config.json; see docs/routing.md.
// Subscribe names no shard, so the ring sends it to a random pod: any pod
// serves any prefix.
//
// # Message sizes
//
// The client sends and receives messages up to DefaultMaxMessageBytes,
// rolloutd's default --max-message-bytes, plus what the server adds to a
// stored record, so that every record the server accepts can be read
// back. Match a server with another limit with WithMaxMessageBytes.
package client
