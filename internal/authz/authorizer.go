package authz

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/filewatch"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// DefaultInterval is how often the policy file is checked for changes.
const DefaultInterval = 10 * time.Second

// ErrDenied is what every DeniedError is.
var ErrDenied = errors.New("permission denied")

// DeniedError is a call the policy does not allow. Its message names the
// identity, the verb and the shard, so that the caller and the operator
// can tell which grant is missing.
type DeniedError struct {
	Identity string // tagged (see Identity); "" for a client without one
	Verb     Verb
	Shard    string
	// Revoked: the call was allowed when it began, and a policy reloaded
	// since no longer allows it (an open stream being ended).
	Revoked bool
	// Hint, if not empty, says why a near miss did not match.
	Hint string
}

func (e *DeniedError) Error() string {
	var msg string
	switch {
	case e.Identity == "":
		msg = fmt.Sprintf("permission denied: %s on shard %q: the client presented no certificate identity, and the authorization policy admits only named identities", e.Verb, e.Shard)
	case e.Revoked:
		msg = fmt.Sprintf("permission denied: permission to %s shard %q was revoked for identity %q: no grant of the authorization policy now in force covers it", e.Verb, e.Shard, e.Identity)
	default:
		msg = fmt.Sprintf("permission denied: identity %q may not %s shard %q: no grant of the authorization policy covers it", e.Identity, verbPhrase(e.Verb), e.Shard)
	}
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// verbPhrase is verb as it reads before "shard".
func verbPhrase(v Verb) string {
	if p, ok := verbPhrases[v]; ok {
		return p
	}
	return string(v)
}

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Authorizer checks calls against the policy in force. It is safe for
// concurrent use.
type Authorizer struct {
	cur atomic.Pointer[Policy]
	w   *filewatch.Watcher // nil for a static policy
}

// NewStatic returns an Authorizer that enforces p, which never changes.
func NewStatic(p *Policy) *Authorizer {
	a := &Authorizer{}
	a.cur.Store(p)
	return a
}

// Load reads the policy in path, failing if it is not valid, and reloads it
// every interval (0 means DefaultInterval; negative, only on Check) when the
// file changes. A changed file that is not valid is logged and rejected, and
// the policy in force stays. Call Close to stop watching.
func Load(path string, interval time.Duration, log *zap.Logger) (*Authorizer, error) {
	if interval == 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = zap.NewNop()
	}
	a := &Authorizer{}
	w, err := filewatch.New([]string{path}, interval, func(c [][]byte) error {
		p, err := Parse(c[0])
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		a.cur.Store(p)
		log.Info("authz: policy in force", zap.String("file", path), zap.Strings("identities", p.Identities()))
		return nil
	}, log.With(zap.String("component", "authz")))
	if err != nil {
		return nil, fmt.Errorf("--authz-file: %w", err)
	}
	a.w = w
	return a, nil
}

// Authorize returns nil if identity (tagged, as Identity returns it) may do
// verb on shard. A shard that is
// not a valid name gets the validation error (nothing can be done to it);
// otherwise a refusal is a *DeniedError.
func (a *Authorizer) Authorize(identity string, verb Verb, shard string) error {
	if err := validate.Shard(shard); err != nil {
		return err
	}
	if p := a.cur.Load(); !p.Allows(identity, verb, shard) {
		return &DeniedError{Identity: identity, Verb: verb, Shard: shard, Hint: p.cnHint(identity)}
	}
	return nil
}

// AuthorizePrefix returns nil if identity may do verb on every shard that
// prefix covers (a consumer's prefix): a grant must cover prefix itself,
// and "" (every shard) needs a grant of AllShards. A trailing '/' is
// ignored. A prefix that is not "" or a shard name gets the validation
// error; otherwise a refusal is a *DeniedError naming the prefix ("*" for
// "").
func (a *Authorizer) AuthorizePrefix(identity string, verb Verb, prefix string) error {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		if p := a.cur.Load(); !p.Allows(identity, verb, AllShards) {
			return &DeniedError{Identity: identity, Verb: verb, Shard: AllShards, Hint: p.cnHint(identity)}
		}
		return nil
	}
	return a.Authorize(identity, verb, prefix)
}

// Allows reports whether identity may do verb on shard under the policy
// in force, without building a refusal: ListShards filters its pages with
// it.
func (a *Authorizer) Allows(identity string, verb Verb, shard string) bool {
	return a.cur.Load().Allows(identity, verb, shard)
}

// Prefixes returns the shard prefixes of identity's grants of verb under
// the policy in force: ListShards lists inside them and nowhere else.
func (a *Authorizer) Prefixes(identity string, verb Verb) []string {
	return a.cur.Load().Prefixes(identity, verb)
}

// AllowsAny reports whether identity may do verb on any shard under the
// policy in force.
func (a *Authorizer) AllowsAny(identity string, verb Verb) bool {
	return a.cur.Load().AllowsAny(identity, verb)
}

// HasAnyGrant reports whether the policy in force grants identity anything
// at all: a server can refuse a caller without one before reading its
// request. It looks identities up as Policy.Allows does.
func (a *Authorizer) HasAnyGrant(identity string) bool {
	p := a.cur.Load()
	return p != nil && identity != "" && len(p.grants[identity]) > 0
}

// Policy returns the policy in force.
func (a *Authorizer) Policy() *Policy { return a.cur.Load() }

// Check checks the policy file now, as the watcher does every interval. It
// reports whether a new policy was applied. A static Authorizer never
// changes.
func (a *Authorizer) Check() (bool, error) {
	if a.w == nil {
		return false, nil
	}
	return a.w.Check()
}

// OnReload registers f to be called after each reload that put a new policy
// in force (not after a rejected file), and returns a function that
// unregisters it. f runs on the goroutine that checked the file, after the
// new policy is in force; it must be quick and must not call Check. A
// static Authorizer never reloads.
func (a *Authorizer) OnReload(f func()) (unregister func()) {
	if a.w == nil {
		return func() {}
	}
	return a.w.OnApply(f)
}

// Stats reports how many policies were loaded (the first included) and how
// many changed files were rejected.
func (a *Authorizer) Stats() (loads, failures uint64) {
	if a.w == nil {
		return 1, 0
	}
	return a.w.Stats()
}

// Close stops watching the policy file. The policy in force stays.
func (a *Authorizer) Close() {
	if a.w != nil {
		a.w.Close()
	}
}
