package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram records durations in fixed memory with a relative error under
// 1/128: values below 128 ns are exact, larger ones fall in one of 128
// buckets per power of two. It is safe for concurrent use, so the progress
// line can read it while workers record, and its memory does not grow with
// the run (the RSS figures stay the server's, not the bench's samples).
type histogram struct {
	counts [(64-subBits)<<subBits + 1<<subBits]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

const subBits = 7

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)<<subBits + int(v>>shift) - 1<<subBits
}

// bucketValue is the midpoint of bucket i.
func bucketValue(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	shift := i>>subBits - 1
	low := uint64(1<<subBits+i&(1<<subBits-1)) << shift
	return low + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(uint64(v))].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

func (h *histogram) count() uint64 { return h.n.Load() }

// reset empties h; no one may record meanwhile.
func (h *histogram) reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
	h.n.Store(0)
	h.max.Store(0)
}

// quantile returns the q-quantile (0 < q <= 1), or 0 when empty. The
// largest value is exact.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return min(time.Duration(bucketValue(i)), time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// latency is a histogram's summary, for the report.
type latency struct {
	Count uint64  `json:"count"`
	P50ms float64 `json:"p50_ms"`
	P90ms float64 `json:"p90_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func (h *histogram) summary() latency {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return latency{
		Count: h.count(),
		P50ms: ms(h.quantile(0.50)),
		P90ms: ms(h.quantile(0.90)),
		P99ms: ms(h.quantile(0.99)),
		MaxMs: ms(time.Duration(h.max.Load())),
	}
}
