package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard"
	shardfollow "github.com/rolloutd/rolloutd/internal/shard/follow"
	"github.com/rolloutd/rolloutd/internal/shard/subscribe"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// service implements rollout.v1.RolloutService. Its handlers are thin:
// validate, prepare, call the writer set or the reader, map the error.
type service struct {
	rolloutv1.UnimplementedRolloutServiceServer

	writers  *writerSet
	reader   *shard.Reader
	notifier *shard.Notifier  // wakes following scans on this instance's commits
	follow   *shardfollow.Set // following Scans share one reader per shard; nil: each reads alone
	// subscribe serves Subscribe (subscribe.go); nil: Unimplemented.
	subscribe *subscribe.Engine
	clock     clock.Clock
	metrics   *Metrics

	maxBatchRecords int
	maxRecordBytes  int

	life lifecycle // lifecycle.go
	cons consumers // consumers.go
}

var _ rolloutv1.RolloutServiceServer = (*service)(nil)

// Append validates the request, prepares its records once, and appends them
// through the writer set.
func (s *service) Append(ctx context.Context, req *rolloutv1.AppendRequest) (*rolloutv1.AppendResponse, error) {
	if err := s.checkAppend(req); err != nil {
		return nil, toStatus(ctx, err)
	}
	entries, derived, err := s.prepare(req)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	results, err := s.writers.append(ctx, req.GetShard(), entries)
	if err != nil {
		var conflict *shard.IDConflictError
		if derived && errors.As(err, &conflict) && isDerived(req, conflict.ID) {
			// The shard's error names the id; say where it came from.
			err = fmt.Errorf("%w; it was derived from request_id %q, which must not be reused for different records", err, req.GetRequestId())
		}
		return nil, appendStatus(ctx, err)
	}
	var size int
	for _, e := range entries {
		size += len(e.Data)
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

// hintRecordTooLarge is what a record over --max-record-bytes can do:
// splitting its batch leaves it as large.
const hintRecordTooLarge = "; shrink the record, or raise the server's --max-record-bytes"

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
			return &LimitError{Field: fmt.Sprintf("records[%d]", i), Detail: fmt.Sprintf("records[%d] encodes to %d bytes, the server takes at most %d per record", i, n, s.maxRecordBytes), Hint: hintRecordTooLarge}
		}
	}
	return nil
}

// isDerived reports whether id is one the server derived for a record of
// req that has no id of its own.
func isDerived(req *rolloutv1.AppendRequest, id string) bool {
	for i, rec := range req.GetRecords() {
		if rec.GetId() == "" && shard.DeriveID(req.GetShard(), req.GetRequestId(), i) == id {
			return true
		}
	}
	return false
}

// prepare prepares the request's records for the writer, once per request:
// a record without an id gets the id derived from the request_id when there
// is one (shard.DeriveID), else a UUIDv7. derived reports whether any id was
// derived. A derived id that equals a caller-set id of the same request is
// refused, since the batch would then hold one id twice.
func (s *service) prepare(req *rolloutv1.AppendRequest) (entries []shard.Entry, derived bool, err error) {
	now := s.clock.Now()
	records, reqID := req.GetRecords(), req.GetRequestId()
	entries = make([]shard.Entry, len(records))
	for i, rec := range records {
		var id string
		if reqID != "" && rec.GetId() == "" {
			id, derived = shard.DeriveID(req.GetShard(), reqID, i), true
		}
		e, err := shard.PrepareWithID(rec, id, now)
		if err != nil {
			return nil, false, &validate.FieldError{Field: fmt.Sprintf("records[%d]", i), Rule: "must encode", Detail: err.Error()}
		}
		entries[i] = e
	}
	if derived {
		callerIDs := make(map[string]int, len(records))
		for i, rec := range records {
			if rec.GetId() != "" {
				callerIDs[rec.GetId()] = i
			}
		}
		for i, rec := range records {
			if j, clash := callerIDs[entries[i].ID]; clash && rec.GetId() == "" {
				return nil, false, &validate.FieldError{Field: fmt.Sprintf("records[%d].id", j), Rule: "must differ from the ids derived from request_id",
					Detail: fmt.Sprintf("%q is the id derived for records[%d]", entries[i].ID, i)}
			}
		}
	}
	return entries, derived, nil
}

// Get reads one record, always through the shard's current manifest, so it
// sees every append acknowledged before it started, by any instance.
func (s *service) Get(ctx context.Context, req *rolloutv1.GetRequest) (*rolloutv1.GetResponse, error) {
	if err := validate.GetRequest(req); err != nil {
		return nil, toStatus(ctx, err)
	}
	rec, err := s.reader.Get(ctx, req.GetShard(), req.GetId())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return &rolloutv1.GetResponse{Record: rec}, nil
}
