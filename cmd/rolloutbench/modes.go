package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/instrumented"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// opCounter counts blob operations with the blob/instrumented decorator,
// on a registry of its own, so that a phase reads exactly its own
// operations. One counter can wrap many stores.
type opCounter struct {
	reg *prometheus.Registry
	m   *instrumented.Metrics
}

func newOpCounter() *opCounter {
	reg := prometheus.NewRegistry()
	return &opCounter{reg: reg, m: instrumented.NewMetrics(reg)}
}

func (c *opCounter) wrap(s blob.Store) blob.Store { return instrumented.New(s, c.m) }

func (c *opCounter) figures() (serverFigures, error) { return figuresOf(c.reg) }

// grpcClients: the product path over gRPC through the client package, one
// client (one ClientConn) shared by every client of the phase (HTTP/2
// multiplexes them), as one client process would.
func grpcClients(c *client.Client) func(int) (clientOps, error) {
	return func(int) (clientOps, error) {
		return clientOps{
			append: func(ctx context.Context, sh string, recs []*rolloutv1.Record) error {
				_, err := c.Append(ctx, sh, recs)
				return err
			},
			get: func(ctx context.Context, sh, id string) error {
				_, err := c.Get(ctx, sh, id)
				return err
			},
		}, nil
	}
}

// writerPool holds the resident shard writers of the resident-shard mode:
// one per shard, opened on first use, closed at the end of the phase.
type writerPool struct {
	store blob.Store
	opts  shard.Options

	mu sync.Mutex
	ws map[string]*poolEntry
}

type poolEntry struct {
	once sync.Once
	w    *shard.Writer
	err  error
}

// newWriterPool opens writers with opts (the zero value: rolloutd's
// defaults), sharing one index cache as the server does.
func newWriterPool(store blob.Store, log *zap.Logger, opts shard.Options) *writerPool {
	opts.Logger = log
	opts.Cache = shard.NewBlobCache(64 << 20)
	return &writerPool{store: store, opts: opts, ws: map[string]*poolEntry{}}
}

func (p *writerPool) get(ctx context.Context, sh string) (*shard.Writer, error) {
	p.mu.Lock()
	e, ok := p.ws[sh]
	if !ok {
		e = &poolEntry{}
		p.ws[sh] = e
	}
	p.mu.Unlock()
	e.once.Do(func() { e.w, e.err = shard.Open(ctx, p.store, sh, p.opts) })
	return e.w, e.err
}

func (p *writerPool) close(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.ws {
		if e.w != nil {
			_ = e.w.Close(ctx)
		}
	}
	clear(p.ws)
}

// shardClients: the product path without gRPC: a resident shard.Writer per
// shard, called directly, with the records prepared as the server prepares
// them.
func shardClients(pool *writerPool) func(int) (clientOps, error) {
	return func(int) (clientOps, error) {
		return clientOps{append: func(ctx context.Context, sh string, recs []*rolloutv1.Record) error {
			w, err := pool.get(ctx, sh)
			if err != nil {
				return err
			}
			entries, err := prepare(recs)
			if err != nil {
				return err
			}
			_, err = w.Append(ctx, entries)
			return err
		}}, nil
	}
}

func prepare(recs []*rolloutv1.Record) ([]shard.Entry, error) {
	now := time.Now()
	entries := make([]shard.Entry, len(recs))
	for i, r := range recs {
		e, err := shard.Prepare(r, now)
		if err != nil {
			return nil, err
		}
		entries[i] = e
	}
	return entries, nil
}

// floorSpec is what the floor writes and reads.
type floorSpec struct {
	store blob.Store
	// prefix holds the floor's own blobs, apart from every shard's.
	prefix string
	// generation is a generation blob of one append's size; manifest is a
	// manifest-sized blob (the product shard's real manifest where known).
	generation []byte
	manifest   []byte
	// readShard is the shard whose manifest and generations the read floor
	// reads; readGens are its live generations' names.
	readShard string
	readGens  []string
	readBytes int64
}

// floorClients: the raw blob operations any correct design needs. An append
// is a create-only PUT of a generation-sized blob, then an If-Match PUT of a
// manifest-sized blob (each client CASes its own manifest), sequential, on
// the shared client: the same definition as internal/shard's Azurite
// benchmarks. A read is a GET of the shard's manifest, then one ranged GET of
// a record's bytes in one of its generations.
func floorClients(fs *floorSpec) func(int) (clientOps, error) {
	return func(i int) (clientOps, error) {
		ctx := context.Background()
		prefix := fmt.Sprintf("%s/c%d", fs.prefix, i)
		mname := prefix + "/manifest"
		attrs, err := fs.store.Put(ctx, mname, fs.manifest, blob.PutOptions{IfNoneMatch: true})
		if err != nil {
			return clientOps{}, fmt.Errorf("floor: create %s: %w", mname, err)
		}
		etag := attrs.ETag
		n := 0
		ops := clientOps{append: func(ctx context.Context, _ string, _ []*rolloutv1.Record) error {
			n++
			if _, err := fs.store.Put(ctx, fmt.Sprintf("%s/g/%d", prefix, n), fs.generation,
				blob.PutOptions{IfNoneMatch: true, PutID: fmt.Sprintf("%s-g%d", prefix, n)}); err != nil {
				return err
			}
			a, err := fs.store.Put(ctx, mname, fs.manifest, blob.PutOptions{IfMatch: etag, PutID: fmt.Sprintf("%s-m%d", prefix, n)})
			if err != nil {
				return err
			}
			etag = a.ETag
			return nil
		}}
		k := i
		ops.get = func(ctx context.Context, _, _ string) error {
			// The product shard's manifest and generations where given,
			// else this client's own (what it appended).
			mn, g := mname, fmt.Sprintf("%s/g/%d", prefix, n)
			if fs.readShard != "" && len(fs.readGens) > 0 {
				k++
				mn, g = format.ManifestName(fs.readShard), fs.readGens[k%len(fs.readGens)]
			} else if n == 0 {
				return fmt.Errorf("floor: nothing appended to read yet")
			}
			if _, _, err := fs.store.Get(ctx, mn, blob.GetOptions{}); err != nil {
				return err
			}
			_, _, err := fs.store.Get(ctx, g, blob.GetOptions{Offset: 0, Length: fs.readBytes})
			return err
		}
		return ops, nil
	}
}

// floor1Clients: the floor of a commit by create (issue 21): one
// create-only PUT of a generation-sized blob per append, at the next name
// of the client's own sequence, on the shared client. No manifest write:
// the least any design that acknowledges an append after one blob write
// can cost. It does not read.
func floor1Clients(fs *floorSpec) func(int) (clientOps, error) {
	return func(i int) (clientOps, error) {
		prefix := fmt.Sprintf("%s/c%d", fs.prefix, i)
		n := 0
		return clientOps{append: func(ctx context.Context, _ string, _ []*rolloutv1.Record) error {
			n++
			_, err := fs.store.Put(ctx, fmt.Sprintf("%s/l/%016x", prefix, n), fs.generation,
				blob.PutOptions{IfNoneMatch: true, PutID: fmt.Sprintf("%s-l%d", prefix, n)})
			return err
		}}, nil
	}
}

// generationBlob builds the generation the writer would write for one
// append of these records.
func generationBlob(sh string, recs []*rolloutv1.Record) ([]byte, error) {
	entries, err := prepare(recs)
	if err != nil {
		return nil, err
	}
	size := 0
	for _, e := range entries {
		size += len(e.Data)
	}
	gb := format.NewGenerationBuilder(sh, 1, 1, size)
	for i, e := range entries {
		gb.Add(e.ID, uint64(i+1), e.Data, e.ClientHash)
	}
	l, err := gb.Finish()
	if err != nil {
		return nil, err
	}
	return l.Data, nil
}

// freshManifest is the manifest a writer claiming a new shard writes: the
// smallest a manifest gets.
func freshManifest() ([]byte, error) {
	return format.EncodeManifest(&storagepb.Manifest{
		Epoch: 1, Owner: "0123456789abcdef", NextGeneration: 1, NextSeq: 1,
		Epochs: []*storagepb.EpochRecord{{Epoch: 1}}, CommitId: "0123456789abcdef-1",
		UpdatedUnixNanos: time.Now().UnixNano(),
	})
}

// perAppendSpec configures the replaced design.
type perAppendSpec struct {
	// newStore builds a new store for one append: for Azure a new client
	// over a new HTTP transport (azure.New), which close drops. Other
	// stores cannot be opened twice in a process; they reuse the shared one
	// and close is a no-op.
	newStore func(ctx context.Context) (blob.Store, func() error, error)
	// counter counts every store's operations.
	counter *opCounter
	log     *zap.Logger
	// freshShard appends each time to a shard never written before, instead
	// of the phase's shards: the cheapest a writer-per-append can be (no
	// live generations to check ids against), a lower bound.
	freshShard func(client, n int) string
}

// perAppendClients: the design rolloutd replaces, built from the real
// packages. Every append builds a new store (a new transport and client for
// Azure), opens a writer (claiming an epoch), appends, closes the writer and
// drops the store. The writer starts with an empty cache, as a new process
// would, so it reads the id filter of every live generation before it
// commits.
func perAppendClients(pa *perAppendSpec) func(int) (clientOps, error) {
	return func(i int) (clientOps, error) {
		n := 0
		return clientOps{append: func(ctx context.Context, sh string, recs []*rolloutv1.Record) error {
			n++
			if pa.freshShard != nil {
				sh = pa.freshShard(i, n)
			}
			raw, drop, err := pa.newStore(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = drop() }()
			st := pa.counter.wrap(raw)
			w, err := shard.Open(ctx, st, sh, shard.Options{Logger: pa.log})
			if err != nil {
				return err
			}
			entries, err := prepare(recs)
			if err != nil {
				w.Abort()
				return err
			}
			if _, err := w.Append(ctx, entries); err != nil {
				w.Abort()
				return err
			}
			return w.Close(ctx)
		}}, nil
	}
}

// directCode maps an error of the in-process modes to the gRPC code
// rolloutd's server would answer with (internal/server's toStatus).
func directCode(err error) codes.Code {
	switch {
	case errors.Is(err, validate.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, shard.ErrShardNotFound), errors.Is(err, shard.ErrRecordNotFound):
		return codes.NotFound
	case errors.Is(err, shard.ErrIDConflict):
		return codes.AlreadyExists
	case errors.Is(err, shard.ErrBackpressure), errors.Is(err, shard.ErrTooLarge):
		return codes.ResourceExhausted
	case errors.Is(err, shard.ErrCorrupt):
		return codes.DataLoss
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, shard.ErrFenced), errors.Is(err, shard.ErrAborted), errors.Is(err, shard.ErrClosed),
		errors.Is(err, shard.ErrOutcomeUnknown), errors.Is(err, blob.ErrUnavailable), errors.Is(err, blob.ErrOutcomeUnknown):
		return codes.Unavailable
	case errors.Is(err, blob.ErrConditionFailed):
		return codes.Aborted // the floor's CAS lost: only a bug in the bench does that
	}
	return codes.Internal
}

// shardNames returns n shard names under base.
func shardNames(base string, n int) []string {
	out := make([]string, n)
	width := len(fmt.Sprint(n - 1))
	for i := range out {
		out[i] = fmt.Sprintf("%s-%0*d", base, width, i)
	}
	return out
}

// sanitize makes s usable inside a shard segment.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '-', r == '.':
			return r
		case 'A' <= r && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, s)
}
