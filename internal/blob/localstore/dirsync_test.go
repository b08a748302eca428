package localstore

import (
	"fmt"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// TestGroupSyncsEachDirectoryOnce: a group fsyncs each directory it
// published in once, however many of its puts went there, and nothing in
// tmp/, which holds nothing that must survive a crash.
func TestGroupSyncsEachDirectoryOnce(t *testing.T) {
	g, obs := newGate(), &groups{}
	var mu sync.Mutex
	dirSyncs := map[string]int{}
	count := func(f vfs.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			mu.Lock()
			dirSyncs[f.Name()]++
			mu.Unlock()
		}
		return g.sync(f)
	}
	s, err := Open(t.TempDir(), withSync(count), WithGroupObserver(obs.observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	create := blob.PutOptions{IfNoneMatch: true}
	// The directories and their parents, made durable once.
	for _, sh := range []string{"a", "b"} {
		if _, err := s.Put(ctx, "shards/"+sh+"/_l/0", []byte("x"), create); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	clear(dirSyncs)
	mu.Unlock()

	blocker := holdPass(t, s, g, "blocker")
	var cs []<-chan putResult
	for i := range 6 {
		cs = append(cs, goPut(ctx, s, fmt.Sprintf("shards/%c/_l/%d", 'a'+i%2, i+1), "x", create))
	}
	waitQueued(t, s, len(cs))
	g.release <- nil
	if r := <-blocker; r.err != nil {
		t.Fatal(r.err)
	}
	for _, c := range cs {
		if r := <-c; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if obs.max() < len(cs) {
		t.Fatalf("largest group %d, want %d", obs.max(), len(cs))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, sh := range []string{"a", "b"} {
		dir, err := s.dirPath("shards/" + sh + "/_l/")
		if err != nil {
			t.Fatal(err)
		}
		if n := dirSyncs[dir]; n != 1 {
			t.Errorf("%s fsynced %d times for one group, want once", dir, n)
		}
	}
	for d, n := range dirSyncs {
		if isTemp(s, d+"/x") || d == s.tmpDir {
			t.Errorf("%s (in tmp/) fsynced %d times", d, n)
		}
	}
}
