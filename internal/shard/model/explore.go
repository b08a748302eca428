package model

import (
	"fmt"
	"hash/maphash"
	"strings"
)

// Mutation breaks rules of the protocol, to show the search catches each
// break. Mutations combine as a bit set.
type Mutation uint16

const (
	// CollectFences lets GC delete fences below the checkpoint
	// (SlateDB #352, #1622; fixed there by PR #1672).
	CollectFences Mutation = 1 << iota
	// NoConfirmRead lets a reader end at the first missing position without
	// the confirming manifest read.
	NoConfirmRead
	// SkipFenceInDoubt lets a same-process reopen skip the fence although the
	// previous writer left a create in doubt.
	SkipFenceInDoubt
	// SkipFenceUnconfirmed lets a same-process reopen skip the fence after a
	// previous writer that answered every create but ended before its claim
	// was confirmed: the rule read literally.
	SkipFenceUnconfirmed
	// TrustCoveredProbes is the reader of the text: after the
	// confirming manifest read it restarts only if the new checkpoint covers
	// the missing position, and otherwise keeps what it probed at positions
	// the new checkpoint now covers.
	TrustCoveredProbes
	// ForgetTailIDs leaves the inherited tail (positions above the claim's
	// checkpoint) out of id lookups, so a retry can store an id twice.
	ForgetTailIDs
	// MergeBeyondCheckpoint lets a merged generation list positions the
	// checkpoint does not cover, which readers then also probe.
	MergeBeyondCheckpoint
	// KeepInDoubtWriter is the writer set that replaces a writer only when
	// it was fenced, went stale, was aborted or closed, and keeps one that
	// stopped itself with a create in doubt, answering every later append
	// with its stored error: a busy shard stays wedged.
	KeepInDoubtWriter
	// LagWaitOutlivesStop lets an append waiting at the lag bound go on
	// waiting after its writer ended, for a checkpoint that cannot land.
	LagWaitOutlivesStop
)

var mutationNames = []string{"collect-fences", "no-confirm-read", "skip-fence-in-doubt", "skip-fence-unconfirmed", "trust-covered-probes", "forget-tail-ids", "merge-beyond-checkpoint", "keep-in-doubt-writer", "lag-wait-outlives-stop"}

func (m Mutation) String() string {
	if m == 0 {
		return "correct"
	}
	var names []string
	for i, n := range mutationNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, "+")
}

// WriterSet selects the writer incarnations that take part.
type WriterSet uint8

const (
	W0         WriterSet = 1 << iota // process A's first writer
	W1                               // process B's writer: a takeover from another process
	W2                               // process A's second writer: a reopen after W0 ended
	AllWriters = W0 | W1 | W2
)

func (ws WriterSet) has(i int) bool { return ws&(1<<i) != 0 }

// Config bounds the exploration.
type Config struct {
	Positions int // writers create at positions 1..Positions
	IDs       int // distinct record ids clients append (and retry)
	Writers   WriterSet
	Faults    int // lost or delayed answers to creates
	Reads     int // reads the reader completes, one after another
	LagK      int // K: no create beyond checkpoint+2K until a checkpoint lands
	Mutation  Mutation
	// StopAt ends the search at the first counterexample of this kind
	// (mutation tests); negative explores everything.
	StopAt Kind
	// MaxStates stops the search (Result.Truncated) once it has seen this
	// many states; 0 means no limit.
	MaxStates int
}

// DefaultConfig is the bound go test explores by default.
func DefaultConfig() Config {
	return Config{Positions: 3, IDs: 2, Writers: AllWriters, Faults: 1, Reads: 2, LagK: 1, StopAt: -1}
}

func (cfg Config) validate() error {
	switch {
	case cfg.Positions < 1 || cfg.Positions > maxPos:
		return fmt.Errorf("model: Positions %d not in 1..%d", cfg.Positions, maxPos)
	case cfg.IDs < 1 || cfg.IDs > maxIDs:
		return fmt.Errorf("model: IDs %d not in 1..%d", cfg.IDs, maxIDs)
	case cfg.Writers == 0 || cfg.Writers&^AllWriters != 0:
		return fmt.Errorf("model: Writers %b not a subset of %b", cfg.Writers, AllWriters)
	case cfg.Faults < 0 || cfg.Reads < 0 || cfg.LagK < 1:
		return fmt.Errorf("model: bad bounds %+v", cfg)
	}
	return nil
}

// Counterexample is a shortest path (in steps) to a violation.
type Counterexample struct {
	Kind  Kind
	Msg   string
	Steps []string
}

// Result is what a search found.
type Result struct {
	States      int
	Transitions int
	Depth       int // BFS levels: the longest shortest path to a state
	Truncated   bool
	Stopped     bool // StopAt was found
	// Violations holds the first counterexample found for each Kind, nil
	// where none was found.
	Violations [numKinds]*Counterexample
	Coverage   map[string]int
}

// Found reports whether any invariant failed.
func (r *Result) Found() bool {
	for _, v := range r.Violations {
		if v != nil {
			return true
		}
	}
	return false
}

// node is how the search remembers a path without keeping states: the
// parent's index and which enabled action led here. Traces are rebuilt by
// replaying those choices from the initial state.
type node struct {
	parent int32
	choice uint16
}

type hit struct {
	parent int32
	choice uint16
	msg    string
	stuck  bool // found in the state the transition reached, which has no successor
}

// Explore visits every state reachable under cfg, breadth first, and checks
// every transition. Visited states are kept as 128-bit hashes (two seeds); a
// collision would prune a state, with odds far below 1e-20 at these sizes.
func Explore(cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	x := &search{
		cfg:   cfg,
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		nodes: []node{{parent: -1}},
		res:   &Result{},
	}
	x.c = &ctx{cfg: &x.cfg}
	s0 := initial(cfg)
	s0.normalize()
	x.visited = map[[2]uint64]struct{}{x.key(&s0): {}}
	level := []item{{s0, 0}}
	for len(level) > 0 && !x.res.Truncated && !x.res.Stopped {
		x.res.Depth++
		level = x.nextLevel(level)
	}
	return x.result(), nil
}

// search is one exploration's state: what it has visited, the path to
// each visited state, and the first hit of each kind of violation.
type search struct {
	cfg     Config
	seeds   [2]maphash.Seed
	visited map[[2]uint64]struct{}
	nodes   []node
	hits    [numKinds]*hit
	c       *ctx
	res     *Result
	acts    []action // reused across states
}

// item is a state of the level being explored, with its node.
type item struct {
	s    State
	node int32
}

func (x *search) key(s *State) [2]uint64 {
	b := s.bytes()
	return [2]uint64{maphash.Bytes(x.seeds[0], b), maphash.Bytes(x.seeds[1], b)}
}

// nextLevel explores every state of level and returns the new states its
// transitions reach.
func (x *search) nextLevel(level []item) []item {
	var next []item
	for li := range level {
		if x.res.Stopped {
			break
		}
		it := &level[li] // states are large: no copies beyond the successor's
		var moved bool
		next, moved = x.expand(it, next)
		if !moved && !x.res.Stopped {
			x.c.reset()
			x.c.checkWedged(&it.s)
			n := x.nodes[it.node]
			x.note(n.parent, n.choice, true)
		}
	}
	return next
}

// expand applies every action enabled in it, appends the unvisited states
// they reach to next, and reports whether any action moved.
func (x *search) expand(it *item, next []item) ([]item, bool) {
	x.acts = enabled(&it.s, &x.cfg, x.acts[:0])
	moved := false
	for ci, a := range x.acts {
		// The successor is built in place at the end of next, and
		// dropped again if it is a no-op or already visited.
		next = append(next, item{s: it.s})
		t := &next[len(next)-1].s
		x.c.reset()
		if !apply(t, a, x.c) {
			next = next[:len(next)-1]
			continue
		}
		x.res.Transitions++
		moved = true
		x.note(it.node, uint16(ci), false)
		t.normalize()
		k := x.key(t)
		if _, ok := x.visited[k]; ok || x.res.Stopped {
			next = next[:len(next)-1]
			if x.res.Stopped {
				break
			}
			continue
		}
		x.visited[k] = struct{}{}
		x.nodes = append(x.nodes, node{it.node, uint16(ci)})
		next[len(next)-1].node = int32(len(x.nodes) - 1)
		if x.cfg.MaxStates > 0 && len(x.nodes) >= x.cfg.MaxStates {
			x.res.Truncated = true
		}
	}
	return next, moved
}

// note keeps the first hit of each kind the last check found, reached by
// choice from parent (stuck: found in a state with no successor), and stops
// the search at a hit of cfg.StopAt.
func (x *search) note(parent int32, choice uint16, stuck bool) {
	for _, v := range x.c.viols {
		if x.hits[v.kind] == nil {
			x.hits[v.kind] = &hit{parent: parent, choice: choice, msg: v.msg, stuck: stuck}
			x.c.skip[v.kind] = true
		}
		if v.kind == x.cfg.StopAt {
			x.res.Stopped = true
		}
	}
}

// result fills in the counts, the coverage and a replayed counterexample
// per kind hit.
func (x *search) result() *Result {
	res := x.res
	res.States = len(x.nodes)
	res.Coverage = make(map[string]int, numCov)
	for k, n := range x.c.cover_ {
		res.Coverage[covNames[k]] = n
	}
	for k, h := range x.hits {
		if h != nil {
			ce := &Counterexample{Kind: Kind(k), Msg: h.msg, Steps: replay(x.cfg, x.nodes, h.parent, h.choice)}
			if h.stuck {
				ce.Steps = append(ce.Steps, "no step is possible\n      !! "+ce.Kind.String()+": "+h.msg)
			}
			res.Violations[k] = ce
		}
	}
	return res
}
