package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// service implements rollout.v1.RolloutService. Its handlers are thin:
// validate, prepare, call the writer set or the reader, map the error.
type service struct {
	rolloutv1.UnimplementedRolloutServiceServer

	writers  *writerSet
	reader   *shard.Reader
	notifier *shard.Notifier // wakes following scans on this instance's commits
	clock    clock.Clock
	metrics  *Metrics

	maxBatchRecords int
	maxRecordBytes  int
}

var _ rolloutv1.RolloutServiceServer = (*service)(nil)

// Append validates the request, prepares its records once, and appends them
// through the writer set.
func (s *service) Append(ctx context.Context, req *rolloutv1.AppendRequest) (*rolloutv1.AppendResponse, error) {
	if err := s.checkAppend(req); err != nil {
		return nil, toStatus(err)
	}
	now := s.clock.Now()
	entries := make([]shard.Entry, len(req.GetRecords()))
	var size int
	for i, rec := range req.GetRecords() {
		e, err := shard.Prepare(rec, now)
		if err != nil {
			return nil, toStatus(&validate.FieldError{Field: fmt.Sprintf("records[%d]", i), Rule: "must encode", Detail: err.Error()})
		}
		entries[i] = e
		size += len(e.Data)
	}
	results, err := s.writers.append(ctx, req.GetShard(), entries)
	if err != nil {
		return nil, appendStatus(err)
	}

	resp := &rolloutv1.AppendResponse{Results: make([]*rolloutv1.AppendResult, len(results))}
	gens := map[uint64]struct{}{}
	for i, r := range results {
		resp.Results[i] = &rolloutv1.AppendResult{
			Id:             r.ID,
			Seq:            r.Seq,
			AlreadyPresent: r.AlreadyPresent,
			Epoch:          r.Epoch,
			Generation:     r.Generation,
		}
		gens[r.Generation] = struct{}{}
		if r.AlreadyPresent {
			s.metrics.alreadyPresent.Inc()
		}
	}
	s.metrics.recordsAppended.Add(float64(len(results)))
	s.metrics.bytesAppended.Add(float64(size))
	s.metrics.generationsPerRPC.Observe(float64(len(gens)))
	return resp, nil
}

// checkAppend validates the request and checks it against the server's
// limits.
func (s *service) checkAppend(req *rolloutv1.AppendRequest) error {
	if err := validate.AppendRequest(req); err != nil {
		return err
	}
	if n := len(req.GetRecords()); n > s.maxBatchRecords {
		return &LimitError{Field: "records", Detail: fmt.Sprintf("the batch has %d records, the server takes at most %d per Append", n, s.maxBatchRecords)}
	}
	for i, rec := range req.GetRecords() {
		if n := proto.Size(rec); n > s.maxRecordBytes {
			return &LimitError{Field: fmt.Sprintf("records[%d]", i), Detail: fmt.Sprintf("records[%d] encodes to %d bytes, the server takes at most %d per record", i, n, s.maxRecordBytes)}
		}
	}
	return nil
}

// Get reads one record, always through the shard's current manifest, so it
// sees every append acknowledged before it started, by any instance.
func (s *service) Get(ctx context.Context, req *rolloutv1.GetRequest) (*rolloutv1.GetResponse, error) {
	if err := validate.GetRequest(req); err != nil {
		return nil, toStatus(err)
	}
	rec, err := s.reader.Get(ctx, req.GetShard(), req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &rolloutv1.GetResponse{Record: rec}, nil
}
