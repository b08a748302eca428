package localstore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/rolloutd/rolloutd/internal/blob"
)

var _ blob.ManyDeleter = (*Store)(nil)

// DeleteMany implements blob.ManyDeleter: it deletes each name as Delete
// would without a condition, and returns each one's error.
//
// The shard collector deletes a pass of retired log positions, all in one
// directory, one at a time (on Azure, a burst of deletes would queue in
// front of the appends): each paid its own directory fsync and a failed
// rmdir of the directory. Here the removals of one directory share one
// fsync and one attempt at pruning. As Delete does, it holds each name's
// lock until the name's removal is durable, so no other call on the name
// sees the removal before then; the locks are taken in stripe order, and
// names that a group in flight may publish, whose delete waits for that
// group, are deleted afterwards, one at a time, with no lock held.
func (s *Store) DeleteMany(ctx context.Context, names []string) []error {
	errs := make([]error, len(names))
	if len(names) == 0 {
		return errs
	}
	done, err := s.enter(ctx, "delete", names[0])
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer done()
	paths := make([]string, len(names))
	for i, n := range names {
		if err := blob.ValidateName(n); err != nil {
			errs[i] = err
		} else if paths[i], err = s.blobPath(n); err != nil {
			errs[i] = err
		}
	}
	dirs, later := s.removeLocked(names, paths, errs)
	for _, d := range dirs {
		s.prune(d)
	}
	for _, i := range later {
		errs[i] = s.deleteEntered(ctx, names[i], paths[i], blob.DeleteOptions{})
	}
	return errs
}

// removeLocked unlinks every name with a path, holding the names' locks,
// and makes the removals durable, each directory once. It returns the
// directories where all went well, to prune, and the names it left to
// delete alone.
func (s *Store) removeLocked(names, paths []string, errs []error) (dirs []string, later []int) {
	unlock := s.lockStripes(names, paths)
	defer unlock()
	removed := map[string][]int{} // by directory
	for i, n := range names {
		switch {
		case paths[i] == "":
			continue
		case s.sync.touches(n):
			later = append(later, i)
			continue
		}
		if err := s.refused("delete", n); err != nil {
			errs[i] = err
			continue
		}
		if err := s.unlink(paths[i]); err != nil {
			errs[i] = fmt.Errorf("localstore: delete %q: %w", n, err)
			continue
		}
		d := filepath.Dir(paths[i])
		removed[d] = append(removed[d], i)
	}
	for d, idx := range removed {
		if err := s.removalDurable(d); err != nil {
			for _, i := range idx {
				// Gone for readers, but may come back in a crash.
				errs[i] = s.fail("delete", names[i], err)
			}
			continue
		}
		dirs = append(dirs, d)
	}
	if ferr := s.Failed(); ferr != nil {
		for _, idx := range removed {
			for _, i := range idx {
				if errs[i] == nil {
					errs[i] = inDoubt("delete", names[i], ferr) // another call failed the store meanwhile
				}
			}
		}
	}
	return dirs, later
}

// lockStripes locks the stripes of the names that have a path, each once,
// in stripe order (so that two callers cannot deadlock), and returns the
// func that unlocks them.
func (s *Store) lockStripes(names, paths []string) (unlock func()) {
	var idx []uint64
	for i, n := range names {
		if paths[i] != "" {
			idx = append(idx, s.stripeIndex(n))
		}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.stripes[i].Lock()
	}
	return func() {
		for _, i := range idx {
			s.stripes[i].Unlock()
		}
	}
}
