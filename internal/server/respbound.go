package server

import rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"

// responseBound is what building the response to req may hold, charged
// before it is built (responses.go): responseBuildFactor times the largest
// response the request can have. Responses that are small whatever the
// request (Append's, DescribeShard's, health) are charged once encoded.
func (a *admission) responseBound(req any) int64 {
	switch r := req.(type) {
	case *rolloutv1.GetRequest:
		// The record's own size when the reader's cache knows it: charging
		// the largest record let a connection build only about 14 Gets of
		// small records at once.
		if a.storedSize != nil {
			if n, ok := a.storedSize(r.GetShard(), r.GetId()); ok {
				return responseBuildFactor * (n + responseFraming)
			}
		}
		return responseBuildFactor * (a.maxRecord + responseFraming)
	case *rolloutv1.BatchGetRequest:
		// Records and their framing within the cap, the first whatever
		// its size, and the ids echoed in the results past it.
		n := a.batchGetBytes + a.maxRecord
		for _, id := range r.GetIds() {
			n += int64(batchGetResultOverhead(len(id)))
		}
		return responseBuildFactor * n
	case *rolloutv1.ListShardsRequest:
		return responseBuildFactor * maxListResponseBytes
	}
	return 0
}

// maxListResponseBytes bounds a ListShards response: a page of at most
// maxListPageSize shards, each a name of at most 255 bytes with its framing
// and a summary (about 100 bytes), and the next page's token.
const maxListResponseBytes = maxListPageSize*(255+8+128) + 1024
