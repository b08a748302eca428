package blobtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mutant wraps a correct store and breaks one rule. Each mutant must make
// the named subtests of the suite fail; otherwise the suite has a blind spot.
type mutant struct {
	blob.Store
	bug string
	mu  sync.Mutex
	got map[string][]byte // for "aliasing"
}

var mutants = map[string][]string{
	"ignore-if-match":        {"CompareAndSwap", "CompareAndSwapMissing", "RacingCompareAndSwap"},
	"ignore-if-none-match":   {"CreateOnly", "RacingCreateOnly"},
	"racy-cas":               {"RacingCompareAndSwap"},
	"no-idempotency":         {"IdempotentCreateOnly", "IdempotentCompareAndSwap"},
	"idempotent-always":      {"IdempotentCreateOnly", "IdempotentCompareAndSwap"},
	"walk-order":             {"ListOrder", "ListPagination", "ListPrefix", "ListAll", "Delete"},
	"token-inclusive":        {"ListPagination"},
	"no-clip":                {"GetRange", "GetRangeEmptyBlob"},
	"range-size":             {"GetRange"},
	"ignore-get-inm":         {"GetIfNoneMatch"},
	"head-drops-putid":       {"Head", "IdempotentCreateOnly"},
	"delete-missing-ok":      {"DeleteMissing"},
	"invalid-as-not-found":   {"InvalidNames"},
	"two-classes":            {"NotFound", "Delete"},
	"ignore-ctx":             {"CanceledContext"},
	"aliasing":               {"NoAliasing"},
	"delete-ignores-ifmatch": {"DeleteConditional"},
	"restart-built-token":    {"ListDelimitedStartAfter", "ListDelimitedManyPrefixes"},
}

func (m *mutant) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	switch m.bug {
	case "ignore-if-match":
		opts.IfMatch = ""
	case "ignore-if-none-match":
		opts.IfNoneMatch = false
	case "racy-cas":
		if opts.IfMatch != "" {
			h, err := m.Store.Head(ctx, name)
			if err != nil || h.ETag != opts.IfMatch {
				return blob.Attrs{}, blob.ErrConditionFailed
			}
			time.Sleep(time.Millisecond)
			opts.IfMatch = ""
		}
	case "no-idempotency":
		if opts.PutID != "" && (opts.IfMatch != "" || opts.IfNoneMatch) {
			h, herr := m.Store.Head(ctx, name)
			a, err := m.Store.Put(ctx, name, data, opts)
			if err == nil && herr == nil && a.ETag == h.ETag {
				return blob.Attrs{}, blob.ErrConditionFailed
			}
			return a, err
		}
	case "idempotent-always":
		a, err := m.Store.Put(ctx, name, data, opts)
		if errors.Is(err, blob.ErrConditionFailed) && opts.PutID != "" {
			if h, herr := m.Store.Head(ctx, name); herr == nil {
				return h, nil
			}
		}
		return a, err
	case "ignore-ctx":
		ctx = context.Background()
	}
	return m.Store.Put(ctx, name, data, opts)
}

func (m *mutant) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	switch m.bug {
	case "no-clip":
		if h, err := m.Store.Head(ctx, name); err == nil && (opts.Offset+opts.Length > h.Size || opts.Offset >= h.Size) && opts.Offset+opts.Length > 0 {
			return nil, blob.Attrs{}, errors.New("range not satisfiable")
		}
	case "range-size":
		b, a, err := m.Store.Get(ctx, name, opts)
		a.Size = int64(len(b))
		return b, a, err
	case "ignore-get-inm":
		opts.IfNoneMatch = ""
	case "two-classes":
		b, a, err := m.Store.Get(ctx, name, opts)
		if errors.Is(err, blob.ErrNotFound) {
			err = fmt.Errorf("%w (%w)", err, blob.ErrUnavailable)
		}
		return b, a, err
	case "ignore-ctx":
		ctx = context.Background()
	case "aliasing":
		b, a, err := m.Store.Get(ctx, name, opts)
		if err != nil {
			return b, a, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		k := name + "\x00" + string(a.ETag) + fmt.Sprint(opts.Offset, opts.Length)
		if prev, ok := m.got[k]; ok {
			return prev, a, nil
		}
		m.got[k] = b
		return b, a, nil
	case "invalid-as-not-found":
		b, a, err := m.Store.Get(ctx, name, opts)
		if errors.Is(err, blob.ErrInvalidName) {
			err = blob.ErrNotFound
		}
		return b, a, err
	}
	return m.Store.Get(ctx, name, opts)
}

func (m *mutant) Head(ctx context.Context, name string) (blob.Attrs, error) {
	a, err := m.Store.Head(ctx, name)
	if m.bug == "head-drops-putid" {
		a.PutID = ""
	}
	return a, err
}

func (m *mutant) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	if m.bug == "delete-ignores-ifmatch" {
		opts.IfMatch = ""
	}
	err := m.Store.Delete(ctx, name, opts)
	if m.bug == "delete-missing-ok" && errors.Is(err, blob.ErrNotFound) {
		return nil
	}
	return err
}

func (m *mutant) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	if m.bug == "restart-built-token" && opts.Delimiter != "" {
		// As Azurite ignores startFrom, with nothing to drop what the
		// token says was listed: a token the store did not mint (its own
		// start with "x") restarts the listing.
		tok, minted := strings.CutPrefix(opts.Token, "x")
		if !minted {
			tok = ""
		}
		opts.Token = tok
		p, err := m.Store.List(ctx, opts)
		if p.Next != "" {
			p.Next = "x" + p.Next
		}
		return p, err
	}
	p, err := m.Store.List(ctx, opts)
	if opts.Delimiter != "" {
		return p, err
	}
	switch m.bug {
	case "walk-order": // directory-walk order: '/' sorts before every other byte
		key := func(s string) string { return strings.ReplaceAll(s, "/", "\x00") }
		sort.Slice(p.Items, func(i, j int) bool { return key(p.Items[i].Name) < key(p.Items[j].Name) })
	case "token-inclusive":
		if p.Next != "" && len(p.Items) > 1 {
			p.Next = p.Items[len(p.Items)-2].Name
		}
	}
	return p, err
}

// TestMutantHelper runs the suite against one mutant when started by
// TestSuiteCatchesMutants; otherwise it does nothing.
func TestMutantHelper(t *testing.T) {
	bug := os.Getenv("BLOBTEST_MUTANT")
	if bug == "" {
		t.Skip("only run as a subprocess of TestSuiteCatchesMutants")
	}
	blobtest.Run(t, func(*testing.T) blob.Store {
		return &mutant{Store: memstore.New(), bug: bug, got: map[string][]byte{}}
	})
}

func TestSuiteCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the suite once per mutant")
	}
	for bug, subtests := range mutants {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutantHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "BLOBTEST_MUTANT="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store with bug %q:\n%s", bug, out)
			}
			for _, st := range subtests {
				if !strings.Contains(string(out), "--- FAIL: TestMutantHelper/"+st+" ") {
					t.Errorf("bug %q: subtest %s did not fail:\n%s", bug, st, out)
				}
			}
		})
	}
}

// TestSuitePassesMemstore is the control: the unbroken store passes.
func TestSuitePassesMemstore(t *testing.T) {
	blobtest.Run(t, func(*testing.T) blob.Store { return memstore.New() })
}
