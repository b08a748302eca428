package shardlog

import "sync"

// Notifier tells followers of a shard that a commit landed. A writer
// publishes after every commit; a following Scan on the same instance wakes
// at once instead of waiting for its next manifest poll. One Notifier serves
// a process. Publishing never blocks, so a slow follower cannot slow a
// writer.
type Notifier struct {
	mu     sync.Mutex
	shards map[string]*notifyEntry
}

type notifyEntry struct {
	ch   chan struct{} // closed and replaced on every publish
	subs int
}

// NewNotifier returns an empty Notifier.
func NewNotifier() *Notifier { return &Notifier{shards: map[string]*notifyEntry{}} }

// Subscribe registers interest in shard. Wait returns the channel to wait
// on; cancel must be called when done.
func (n *Notifier) Subscribe(shard string) (wait func() <-chan struct{}, cancel func()) {
	n.mu.Lock()
	e, ok := n.shards[shard]
	if !ok {
		e = &notifyEntry{ch: make(chan struct{})}
		n.shards[shard] = e
	}
	e.subs++
	n.mu.Unlock()
	wait = func() <-chan struct{} {
		n.mu.Lock()
		defer n.mu.Unlock()
		return e.ch
	}
	var once sync.Once
	cancel = func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if e.subs--; e.subs == 0 {
				delete(n.shards, shard)
			}
		})
	}
	return wait, cancel
}

// Publish wakes every subscriber of shard.
func (n *Notifier) Publish(shard string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.shards[shard]; ok {
		close(e.ch)
		e.ch = make(chan struct{})
	}
}
