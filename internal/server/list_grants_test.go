package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// listTouches records every name a listing sends to the store or gets
// back from it.
type listTouches struct {
	blob.Store
	mu      sync.Mutex
	touched []string
}

func (r *listTouches) note(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touched = append(r.touched, names...)
}

func (r *listTouches) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	p, err := r.Store.List(ctx, opts)
	r.note(opts.Prefix, opts.Token, p.Next)
	for _, it := range p.Items {
		r.note(it.Name)
	}
	r.note(p.Prefixes...)
	return p, err
}

const listGrantsPolicy = `
grants:
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [append, list]
  - identities: [reader.team-b.test]
    shardPrefixes: [team-b]
    verbs: [append]
`

// Attack 3 of docs/security.md: a caller granted list on team-a only pages
// through, one shard a page. Neither its page tokens nor anything the
// store was asked or answered names team-b's shard or team-a's byte
// neighbours; forged and foreign tokens are INVALID_ARGUMENT. Before, the
// listing ran over every shard and filtered after, and a token decoded to
// "…shards/team-b/secret-project-x/_".
func TestListShardsStaysInGrants(t *testing.T) {
	rec := &listTouches{Store: memstore.New()}
	as := startAuthzConfig(t, listGrantsPolicy, Config{Store: rec})
	trainer, reader := as.clients[idTrainer], as.clients[idReader]
	for _, s := range []string{"team-a/x", "team-a/y"} {
		if _, err := trainer.Append(rpcCtx(t), appendReq(s, "r-1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reader.Append(rpcCtx(t), appendReq("team-b/secret-project-x", "r-1")); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	rec.touched = nil
	rec.mu.Unlock()
	var listed, tokens []string
	for token := ""; ; {
		resp, err := trainer.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetShards() {
			listed = append(listed, s.GetShard())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		raw, _ := base64.RawURLEncoding.DecodeString(token)
		tokens = append(tokens, string(raw))
		if len(tokens) > 10 {
			t.Fatalf("no end to the listing: %q", tokens)
		}
	}
	if fmt.Sprint(listed) != "[team-a/x team-a/y]" {
		t.Fatalf("listed %v, want [team-a/x team-a/y]", listed)
	}
	for _, n := range append(tokens, rec.touched...) {
		if strings.Contains(n, "team-b") || (n != "" && !strings.Contains(n, "team-a/")) {
			t.Fatalf("the listing touched or handed out %q, outside the caller's grant (tokens %q)", n, tokens)
		}
	}
	forged := map[string]string{
		"unknown kind byte": base64.RawURLEncoding.EncodeToString([]byte("1\x00\x00zshards/team-b/")),
		"version 1 marker":  base64.RawURLEncoding.EncodeToString([]byte("1\x00\x00pshards/team-b/secret-project-x/_")),
		"not base64":        "?!",
		"position outside":  base64.RawURLEncoding.EncodeToString([]byte("2\x00\x00" + strings.Split(tokens[0], "\x00")[2] + "\x00team-b/secret-project-x")),
		"another prefix's":  base64.RawURLEncoding.EncodeToString([]byte(tokens[0])),
	}
	for what, tok := range forged {
		prefix := ""
		if what == "another prefix's" {
			prefix = "team-a"
		}
		_, err := trainer.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{Prefix: prefix, PageSize: 1, PageToken: tok})
		wantReason(t, "ListShards with a forged token ("+what+")", err, codes.InvalidArgument, "")
	}
}
