package shard

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// listRecorder is a store that records every name a listing sends to the
// store or gets back from it.
type listRecorder struct {
	store   *faultstore.Store
	mu      sync.Mutex
	touched []string
}

func newListRecorder(inner blob.Store) *listRecorder {
	r := &listRecorder{store: faultstore.New(inner, 1)}
	r.store.OnLanded(faultstore.Match{Ops: []faultstore.Op{faultstore.OpList}}, func(c faultstore.Call) {
		r.note(c.Name)
		r.note(c.Listed...)
	})
	return r
}

func (r *listRecorder) note(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touched = append(r.touched, names...)
}

func listStores() map[string]func(testing.TB) blob.Store {
	return map[string]func(testing.TB) blob.Store{
		"memstore": func(testing.TB) blob.Store { return memstore.New() },
		"localstore": func(t testing.TB) blob.Store {
			s, err := localstore.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"azurite": azureStore,
	}
}

// A caller granted list on team-a and team-c/x pages through everything,
// one shard a page: it sees exactly its shards in storage order, each
// once, and neither the store nor a token ever names a shard outside its
// grants, neighbours that share a byte prefix ("team-ab", "team-a-x")
// included. On Azurite, which ignores startFrom, a listing that silently
// restarted from the beginning would list team-a's first shard twice.
func TestListStaysInGrants(t *testing.T) {
	for name, newStore := range listStores() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rec := newListRecorder(newStore(t))
			mine := []string{"team-a/0", "team-a", "team-a/b", "team-a/b/c", "team-a/z", "team-c/x", "team-c/x/y"}
			var names []string
			for _, s := range append(mine, "team-a-x", "team-ab/secret", "team-a0", "team-b/secret-project-x", "team-c", "team-c/xx", "team-c/w") {
				names = append(names, format.ManifestName(s))
			}
			for g := range 7 {
				names = append(names, format.GenerationName("team-a", 1, uint64(g+1)))
			}
			putAll(t, rec.store, names)
			opts := ListOptions{Grants: []string{"team-c/x", "team-a"}, Caller: "uri:team-a"}
			for _, size := range []int{1, 2, 3, 100} {
				rec.touched = nil
				var got []string
				opts.Token = ""
				for pages := 0; ; pages++ {
					opts.Max = size
					p, err := List(ctx, rec.store, opts)
					if err != nil {
						t.Fatalf("page size %d, page %d: %v", size, pages, err)
					}
					if pages > 20 || len(p.Shards) > size {
						t.Fatalf("page size %d: page %d of %d shards", size, pages, len(p.Shards))
					}
					got = append(got, p.Shards...)
					if p.Next == "" {
						break
					}
					raw, _ := base64.RawURLEncoding.DecodeString(p.Next)
					rec.note(string(raw))
					opts.Token = p.Next
				}
				want := "[team-a/0 team-a team-a/b team-a/b/c team-a/z team-c/x team-c/x/y]"
				if fmt.Sprint(got) != want {
					t.Fatalf("page size %d: listed %v, want %s", size, got, want)
				}
				for _, n := range rec.touched {
					for _, foreign := range []string{"team-a-x", "team-ab", "team-a0", "team-b", "team-c/xx", "team-c/w", "team-c/_"} {
						if strings.Contains(n, foreign) {
							t.Fatalf("page size %d: the listing touched %q, outside the grants", size, n)
						}
					}
				}
			}
		})
	}
}

// A token is good only for the listing that issued it, and only at a
// position the caller may list now.
func TestListRefusesForeignTokens(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	putAll(t, store, []string{format.ManifestName("team-a/x"), format.ManifestName("team-a/y"), format.ManifestName("team-b/s")})
	opts := ListOptions{Grants: []string{"team-a"}, Caller: "uri:a", Max: 1}
	p, err := List(ctx, store, opts)
	if err != nil || p.Next == "" {
		t.Fatalf("first page = %+v, %v", p, err)
	}
	v1 := base64.RawURLEncoding.EncodeToString([]byte("1\x00\x00pshards/team-b/s/_"))
	kind := base64.RawURLEncoding.EncodeToString([]byte("x\x00\x00team-a/x"))
	bad := map[string]ListOptions{
		"another caller's":             {Grants: opts.Grants, Caller: "uri:b", Token: p.Next},
		"another prefix's":             {Prefix: "team-a", Grants: opts.Grants, Caller: "uri:a", Token: p.Next},
		"one whose grant was revoked":  {Grants: []string{"team-b"}, Caller: "uri:a", Token: p.Next},
		"a position outside the grant": {Grants: opts.Grants, Caller: "uri:a", Token: encodePageToken("", "uri:a", "team-b/s")},
		"version 1 (a store marker)":   {Grants: opts.Grants, Caller: "uri:a", Token: v1},
		"an unknown kind":              {Grants: opts.Grants, Caller: "uri:a", Token: kind},
		"not base64":                   {Grants: opts.Grants, Caller: "uri:a", Token: "%%%"},
	}
	for what, o := range bad {
		if _, err := List(ctx, store, o); !errors.Is(err, ErrBadPageToken) {
			t.Errorf("%s token: %v, want ErrBadPageToken", what, err)
		}
	}
	opts.Token = p.Next
	if p2, err := List(ctx, store, opts); err != nil || fmt.Sprint(p2.Shards) != "[team-a/y]" {
		t.Fatalf("second page = %+v, %v", p2, err)
	}
}

// No list grant lists nothing and touches nothing.
func TestListWithoutGrants(t *testing.T) {
	rec := newListRecorder(memstore.New())
	putAll(t, rec.store, []string{format.ManifestName("team-b/s")})
	p, err := List(context.Background(), rec.store, ListOptions{Caller: "uri:a"})
	if err != nil || len(p.Shards) != 0 || p.Next != "" || len(rec.touched) != 0 {
		t.Fatalf("listing without grants = %+v, %v, touched %q", p, err, rec.touched)
	}
}

// A page token that a pod of the previous release minted (this literal,
// from the code before blob.Store's one List) resumes on this release
// where it left off, so that a listing crosses a rolling upgrade: a
// ListShards token holds only the last shard shown, never a store token.
// Were its format to change, such a token must be ErrBadPageToken
// (INVALID_ARGUMENT), never a listing silently restarted.
func TestListShardsTokenFromPreviousRelease(t *testing.T) {
	const minted = "MgB0ZWFtLWEAZDNmZDA0MWViZTg0OWFkNwB0ZWFtLWEveA" // prefix team-a, caller uri:a, last team-a/x
	ctx := context.Background()
	store := memstore.New()
	putAll(t, store, []string{format.ManifestName("team-a/w"), format.ManifestName("team-a/x"),
		format.ManifestName("team-a/y"), format.ManifestName("team-a/z")})
	p, err := List(ctx, store, ListOptions{Prefix: "team-a", Grants: []string{"team-a"}, Caller: "uri:a", Token: minted, Max: 1})
	if err != nil || fmt.Sprint(p.Shards) != "[team-a/y]" || p.Next == "" {
		t.Fatalf("page after a previous release's token = %+v, %v; want [team-a/y] and a token", p, err)
	}
}
