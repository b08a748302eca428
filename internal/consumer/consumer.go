package consumer

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// Errors. Store errors (blob.ErrUnavailable, blob.ErrOutcomeUnknown, ...)
// come through wrapped with their class.
var (
	// ErrNotFound: the consumer was never committed, or was deleted.
	ErrNotFound = errors.New("consumer not found")
	// ErrReset: a commit named a generation other than the consumer's (the
	// consumer was reset since); nothing was stored. Errors of this class
	// are *ResetError values, which carry the consumer's generation.
	ErrReset = errors.New("consumer was reset")
	// ErrTooManyPositions: a commit or reset would store more than
	// MaxPositions shards; nothing was stored.
	ErrTooManyPositions = errors.New("too many consumer positions")
	// ErrCorrupt: a stored consumer blob failed to decode or verify.
	ErrCorrupt = errors.New("corrupt stored consumer")
)

// MaxPositions bounds the shards one consumer holds a position for. A
// consumer is one blob rewritten whole by each commit, so its size is what
// one commit costs: 100,000 positions of 30-byte shard names are about 4
// MB. A prefix with more shards needs consumers of narrower prefixes.
const MaxPositions = 100_000

// ResetError is ErrReset with the consumer's current generation.
type ResetError struct {
	Key Key
	// Generation is the consumer's generation now; 0 when the consumer
	// no longer exists (it was deleted).
	Generation uint64
	// Committed is the generation the refused commit named.
	Committed uint64
}

func (e *ResetError) Error() string {
	if e.Generation == 0 {
		return fmt.Sprintf("%s: consumer %s was deleted since generation %d; start again from the consumer", ErrReset, e.Key, e.Committed)
	}
	return fmt.Sprintf("%s: consumer %s is at generation %d, the commit was for generation %d; start again from the consumer", ErrReset, e.Key, e.Generation, e.Committed)
}

// Is makes errors.Is(err, ErrReset) true for a *ResetError.
func (e *ResetError) Is(target error) bool { return target == ErrReset }

// Key names a consumer: the same name under two prefixes is two consumers.
type Key struct {
	// Prefix covers the consumer's shards on whole segments; "" covers
	// every shard. Normalized: no trailing '/'.
	Prefix string
	// Name is 1-63 characters of [a-z0-9._-] starting with a letter or
	// digit.
	Name string
}

// String renders k as "<prefix>:<name>", the consumer's label in logs and
// metrics.
func (k Key) String() string { return k.Prefix + ":" + k.Name }

// Consumer is a consumer's stored state.
type Consumer struct {
	Key
	// Generation starts at 1 and grows by one with each Reset.
	Generation uint64
	// Positions maps each shard to the cursor the consumer processed it up
	// to. The caller owns the map.
	Positions map[string]uint64
	// CreatedAt is the first write's time; UpdatedAt the last write's that
	// changed the positions (or reset them).
	CreatedAt, UpdatedAt time.Time
}

// Options configure a Store.
type Options struct {
	// Clock stamps CreatedAt and UpdatedAt; nil is the wall clock. Backoffs
	// between attempts wait on the wall clock whatever it is.
	Clock clock.Clock
	// Logger; nil logs nothing.
	Logger *zap.Logger
}

// Store reads and writes consumers in a blob.Store. It holds no state of
// its own beyond its options, so any number of Stores, in any number of
// processes, may share one blob.Store.
type Store struct {
	store blob.Store
	clock clock.Clock
	log   *zap.Logger
	// maxPositions is MaxPositions, lowered by tests.
	maxPositions int
}

// New returns a Store of the consumers in store.
func New(store blob.Store, opts Options) *Store {
	s := &Store{store: store, clock: opts.Clock, log: opts.Logger, maxPositions: MaxPositions}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	return s
}

// NormalizePrefix drops a trailing '/' from prefix and checks what is left:
// "" or a shard name. The error is a *validate.FieldError for field.
func NormalizePrefix(field, prefix string) (string, error) {
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		return "", nil
	}
	if err := validate.Shard(p); err != nil {
		return "", &validate.FieldError{Field: field, Rule: "must be empty or a shard name", Detail: err.Error()}
	}
	return p, nil
}

// ValidateName checks a consumer name: one shard segment, 1-63 characters
// of [a-z0-9._-] starting with a letter or digit. The error is a
// *validate.FieldError for field.
func ValidateName(field, name string) error {
	if name == "" {
		return &validate.FieldError{Field: field, Rule: "required"}
	}
	if strings.Contains(name, "/") || validate.Shard(name) != nil {
		return &validate.FieldError{Field: field, Rule: "must be 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
			Detail: fmt.Sprintf("got %q", name)}
	}
	return nil
}

// Normalize checks k and returns it with its prefix normalized. The errors
// are *validate.FieldError for "prefix" and "consumer".
func (k Key) Normalize() (Key, error) {
	p, err := NormalizePrefix("prefix", k.Prefix)
	if err != nil {
		return Key{}, err
	}
	if err := ValidateName("consumer", k.Name); err != nil {
		return Key{}, err
	}
	return Key{Prefix: p, Name: k.Name}, nil
}

// ValidatePositions checks that each shard of positions is a shard name
// under prefix, and that there are at most MaxPositions. field names the
// map in errors ("positions").
func ValidatePositions(field, prefix string, positions map[string]uint64) error {
	if len(positions) > MaxPositions {
		return fmt.Errorf("%w: %s holds %d shards, at most %d are stored per consumer; use consumers of narrower prefixes",
			ErrTooManyPositions, field, len(positions), MaxPositions)
	}
	for sh := range positions {
		if err := validate.Shard(sh); err != nil {
			return &validate.FieldError{Field: field, Rule: "keys must be shard names", Detail: err.Error()}
		}
		if !validate.Covers(prefix, sh) {
			return &validate.FieldError{Field: field, Rule: "shards must lie under the consumer's prefix",
				Detail: fmt.Sprintf("shard %q is not under prefix %q", sh, prefix)}
		}
	}
	return nil
}

// clone returns c with a copy of its positions.
func (c *Consumer) clone() *Consumer {
	out := *c
	out.Positions = maps.Clone(c.Positions)
	if out.Positions == nil {
		out.Positions = map[string]uint64{}
	}
	return &out
}
