package consumer

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func keysOf(p Page) []Key {
	var ks []Key
	for _, c := range p.Consumers {
		ks = append(ks, c.Key)
	}
	return ks
}

// listAll pages through a listing one consumer at a time, checking each
// page's token.
func listAll(t *testing.T, s *Store, opts ListOptions) []Key {
	t.Helper()
	var all []Key
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("listing does not end")
		}
		page, err := s.ListIn(ctxT(t), opts)
		if err != nil {
			t.Fatalf("ListIn(%+v): %v", opts, err)
		}
		all = append(all, keysOf(page)...)
		if page.Next == "" {
			return all
		}
		opts.Token = page.Next
	}
}

func TestList(t *testing.T) {
	eachBackend(t, func(t *testing.T, bs blob.Store) {
		s, _ := newStore(t, bs)
		keys := []Key{
			{Name: "all"},
			{Prefix: "team-a", Name: "r0"},
			{Prefix: "team-a", Name: "r1"},
			{Prefix: "team-a/exp", Name: "r0"},
			{Prefix: "team-a-x", Name: "r0"},
			{Prefix: "team-b", Name: "r0"},
		}
		for _, k := range keys {
			mustCommit(t, s, k, nil, 0)
		}
		// Shards are not consumers, and a listing of consumers never reads them.
		if _, err := bs.Put(ctxT(t), "shards/team-a/_manifest", []byte("x"), blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			opts ListOptions
			want []Key
		}{
			// In the byte order of the blob names: "_c" before any segment, "-" before "/".
			{"every consumer", ListOptions{Unrestricted: true}, []Key{keys[0], keys[4], keys[1], keys[2], keys[3], keys[5]}},
			{"under a prefix, whole segments", ListOptions{Prefix: "team-a", Unrestricted: true}, []Key{keys[1], keys[2], keys[3]}},
			{"trailing slash", ListOptions{Prefix: "team-a/", Unrestricted: true}, []Key{keys[1], keys[2], keys[3]}},
			{"nested", ListOptions{Prefix: "team-a/exp", Unrestricted: true}, []Key{keys[3]}},
			{"nothing", ListOptions{Prefix: "team-c", Unrestricted: true}, nil},
			{"grants narrow the listing", ListOptions{Grants: []string{"team-a/exp", "team-b"}}, []Key{keys[3], keys[5]}},
			{"a grant under the prefix does not show the prefix's own consumers", ListOptions{Prefix: "team-a", Grants: []string{"team-a/exp"}}, []Key{keys[3]}},
			{"a grant of all", ListOptions{Prefix: "team-b", Grants: []string{"*"}}, []Key{keys[5]}},
			{"no grants", ListOptions{Grants: nil}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, max := range []int{1, 2, 100} {
					opts := tc.opts
					opts.Max = max
					if got := listAll(t, s, opts); !slices.Equal(got, tc.want) {
						t.Errorf("max %d: %v, want %v", max, got, tc.want)
					}
				}
			})
		}
	})
}

func TestListTokens(t *testing.T) {
	s, _ := newStore(t, backends[0].open(t))
	for _, k := range []Key{{Prefix: "team-a", Name: "r0"}, {Prefix: "team-a", Name: "r1"}, {Prefix: "team-b", Name: "r0"}} {
		mustCommit(t, s, k, nil, 0)
	}
	page, err := s.ListIn(ctxT(t), ListOptions{Unrestricted: true, Caller: "alice", Max: 1})
	if err != nil || page.Next == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	for _, tc := range []struct {
		name string
		opts ListOptions
	}{
		{"garbage", ListOptions{Unrestricted: true, Caller: "alice", Token: "%%%"}},
		{"another prefix", ListOptions{Prefix: "team-a", Unrestricted: true, Caller: "alice", Token: page.Next}},
		{"another caller", ListOptions{Unrestricted: true, Caller: "bob", Token: page.Next}},
		{"a position outside the grants", ListOptions{Grants: []string{"team-b"}, Caller: "alice", Token: page.Next}},
	} {
		if _, err := s.ListIn(ctxT(t), tc.opts); !errors.Is(err, ErrBadPageToken) {
			t.Errorf("%s: %v, want ErrBadPageToken", tc.name, err)
		}
	}
}

// A consumer whose blob does not verify is left out of listings, and
// answers ErrCorrupt to Load; the others are listed.
func TestListSkipsCorrupt(t *testing.T) {
	bs := backends[0].open(t)
	s, _ := newStore(t, bs)
	good, bad := Key{Prefix: "p", Name: "good"}, Key{Prefix: "p", Name: "bad"}
	mustCommit(t, s, good, nil, 0)
	mustCommit(t, s, bad, nil, 0)
	b, _, err := bs.Get(ctxT(t), blobName(bad), blob.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if _, err := bs.Put(ctxT(t), blobName(bad), b, blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctxT(t), bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a corrupt consumer: %v, want ErrCorrupt", err)
	}
	if got := listAll(t, s, ListOptions{Unrestricted: true}); !slices.Equal(got, []Key{good}) {
		t.Fatalf("listed %v, want only %v", got, good)
	}
	// The way out: delete it, and commit or reset afresh.
	if _, err := s.Reset(ctxT(t), bad, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Reset of a corrupt consumer: %v, want ErrCorrupt", err)
	}
	if err := s.Delete(ctxT(t), bad); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, bad, nil, 0)
}

// A listing reads no stored name outside the caller's grants: neither the
// store's listings nor their answers, nor the page tokens, name team-a's
// consumers to a caller granted team-b.
func TestListStaysInGrants(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	var mu sync.Mutex
	var touched []string
	fs.OnLanded(faultstore.Match{}, func(c faultstore.Call) {
		mu.Lock()
		defer mu.Unlock()
		touched = append(append(touched, c.Name, c.Token, c.Next), c.Listed...)
	})
	s, _ := newStore(t, fs)
	for _, k := range []Key{{Prefix: "team-a", Name: "secret"}, {Prefix: "team-b", Name: "r0"}, {Prefix: "team-b", Name: "r1"}, {Prefix: "team-b/x", Name: "r0"}, {Name: "all"}} {
		mustCommit(t, s, k, nil, 0)
	}
	mu.Lock()
	touched = nil
	mu.Unlock()
	var tokens []string
	opts := ListOptions{Grants: []string{"team-b"}, Caller: "b", Max: 1}
	for {
		page, err := s.ListIn(ctxT(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		if page.Next == "" {
			break
		}
		raw, err := base64.RawURLEncoding.DecodeString(page.Next)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, string(raw))
		opts.Token = page.Next
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range append(touched, tokens...) {
		if strings.Contains(n, "team-a") || strings.Contains(n, "_c/all") {
			t.Errorf("a listing by team-b touched %q", n)
		}
	}
	if len(tokens) != 2 {
		t.Errorf("%d page tokens for 3 consumers a page", len(tokens))
	}
}
