package server

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

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
	store := faultstore.New(memstore.New(), 1)
	var mu sync.Mutex
	var touched []string // every name a listing sends to the store or gets back from it
	store.OnLanded(faultstore.Match{Ops: []faultstore.Op{faultstore.OpList}}, func(c faultstore.Call) {
		mu.Lock()
		defer mu.Unlock()
		touched = append(append(touched, c.Name, c.Token, c.Next), c.Listed...)
	})
	as := startAuthzConfig(t, listGrantsPolicy, Config{Store: store})
	trainer, reader := as.clients[idTrainer], as.clients[idReader]
	for _, s := range []string{"team-a/x", "team-a/y"} {
		if _, err := trainer.Append(rpcCtx(t), appendReq(s, "r-1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reader.Append(rpcCtx(t), appendReq("team-b/secret-project-x", "r-1")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	touched = nil
	mu.Unlock()
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
	mu.Lock()
	defer mu.Unlock()
	for _, n := range append(tokens, touched...) {
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
