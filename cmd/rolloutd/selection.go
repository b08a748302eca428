package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rolloutd/rolloutd/client"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// A --prefix means one thing in every command: whole '/'-separated
// segments of shard names, as ListShards and the authorization policy
// match them (validate.Covers): "team-a" selects "team-a" and "team-a/run1",
// never "team-ab". The commands that only read (list, export) take an
// empty or absent --prefix as every shard; purge, which deletes, takes
// --all instead, so that an unset variable in a script never means every
// shard. "*" is no prefix and is refused.

// parsePrefix checks value, cmd's --prefix, and drops one trailing '/'.
// every says how cmd selects every shard, for the message refusing "*".
func parsePrefix(cmd, value, every string) (string, error) {
	if value == "*" {
		return "", fmt.Errorf("%s: --prefix '*': '*' is not a prefix; %s", cmd, every)
	}
	p := strings.TrimSuffix(value, "/")
	if value == "" {
		return "", nil
	}
	if err := validate.Shard(p); err != nil {
		return "", fmt.Errorf("%s: --prefix %q: a prefix is whole '/'-separated segments of shard names: %v", cmd, value, err)
	}
	return p, nil
}

// shardLister lists the names of the shards prefix covers, in ListShards'
// order, until yield returns false.
type shardLister func(ctx context.Context, prefix string, yield func(shard string) bool) error

func clientLister(c *client.Client) shardLister {
	return func(ctx context.Context, prefix string, yield func(string) bool) error {
		for s, err := range c.AllShards(ctx, prefix, 1000, false) {
			if err != nil {
				return err
			}
			if !yield(s.GetShard()) {
				return nil
			}
		}
		return nil
	}
}

func storeLister(s blob.Store) shardLister {
	return func(ctx context.Context, prefix string, yield func(string) bool) error {
		token := ""
		for {
			page, err := shard.ListShards(ctx, s, prefix, token, 0)
			if err != nil {
				return err
			}
			for _, sh := range page.Shards {
				if !yield(sh) {
					return nil
				}
			}
			if token = page.Next; token == "" {
				return nil
			}
		}
	}
}

// maxHintNames bounds the names read for a hint: it is worth a bounded
// listing, not a walk of a whole store.
const maxHintNames = 100_000

// maxNear is how many of the closest prefixes a hint names.
const maxNear = 3

// selectionHint is what exists near asked, a prefix or shard that matched
// nothing. meant are the whole-segment prefixes that start with asked as a
// string ("demo" for "de"): what a string prefix would have selected.
// under says that shards lie under asked (a shard asked that is only a
// prefix). near are the closest prefixes beside asked, under its nearest
// parent that holds shards.
type selectionHint struct {
	meant []string
	under bool
	near  []string
}

func findHint(ctx context.Context, list shardLister, asked string) (selectionHint, error) {
	var h selectionHint
	first := true
	for parent := parentOf(asked); ; parent = parentOf(parent) {
		meant, near := map[string]bool{}, map[string]bool{}
		n := 0
		err := list(ctx, parent, func(sh string) bool {
			n++
			switch {
			case validate.Covers(asked, sh):
				h.under = true
			case first && strings.HasPrefix(sh, asked):
				meant[segmentAt(sh, len(asked))] = true
			}
			start := len(parent) + 1
			if parent == "" {
				start = 0
			}
			near[segmentAt(sh, start)] = true
			return n < maxHintNames
		})
		if err != nil {
			return h, err
		}
		if len(meant) > 0 || h.under {
			h.meant = slices.Sorted(func(yield func(string) bool) {
				for m := range meant {
					if !yield(m) {
						return
					}
				}
			})
			return h, nil
		}
		if len(near) > 0 {
			h.near = closest(asked, near)
			return h, nil
		}
		if parent == "" {
			return h, nil
		}
		first = false
	}
}

// parentOf is prefix without its last segment ("" for one segment).
func parentOf(prefix string) string {
	return prefix[:max(strings.LastIndexByte(prefix, '/'), 0)]
}

// segmentAt is name up to the end of the segment that holds byte i.
func segmentAt(name string, i int) string {
	if j := strings.IndexByte(name[i:], '/'); j >= 0 {
		return name[:i+j]
	}
	return name
}

// closest are the maxNear names nearest to asked by edit distance.
func closest(asked string, names map[string]bool) []string {
	type scored struct {
		name string
		d    int
	}
	var all []scored
	for n := range names {
		all = append(all, scored{n, editDistance(asked, n)})
	}
	slices.SortFunc(all, func(a, b scored) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for _, s := range all[:min(len(all), maxNear)] {
		out = append(out, s.name)
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// orList is names quoted, as in `"a", "b" or "c"`.
func orList(names []string) string {
	q := quoted(names)
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// prefixHint is the end of the error for a prefix under which no shard
// is: the segments it may have meant, or the closest that exist.
func (h selectionHint) prefixHint() string {
	switch {
	case len(h.meant) > 0:
		return fmt.Sprintf(": prefixes are whole segments; did you mean %s?", orList(h.meant))
	case len(h.near) > 0:
		return fmt.Sprintf("; the closest prefixes that exist: %s", strings.Join(quoted(h.near), ", "))
	}
	return ""
}

// shardHint is the end of the error for a shard that does not exist.
// flag is how the command selects shards under a prefix.
func (h selectionHint) shardHint(asked, flag string) string {
	switch {
	case h.under:
		return fmt.Sprintf("; shards lie under it: select them with %s %s", flag, asked)
	case len(h.meant) > 0:
		return fmt.Sprintf("; did you mean %s?", orList(h.meant))
	case len(h.near) > 0:
		return fmt.Sprintf("; the closest that exist: %s", strings.Join(quoted(h.near), ", "))
	}
	return ""
}

func quoted(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return q
}

// wrongPrefix is the error for a prefix under which no shard is, but
// under which a string prefix would have found some: a command written
// for string prefixes must not silently select nothing. nil otherwise.
func wrongPrefix(ctx context.Context, cmd string, list shardLister, prefix string) error {
	if prefix == "" {
		return nil
	}
	h, err := findHint(ctx, list, prefix)
	if err != nil || len(h.meant) == 0 {
		return nil // the hint is a courtesy: its failure is not the command's
	}
	return fmt.Errorf("%s: no shard under prefix %q%s", cmd, prefix, h.prefixHint())
}
