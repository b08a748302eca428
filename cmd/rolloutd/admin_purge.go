package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// purgeBeforeDelete, when set (by tests), runs before each of purge's
// deletes: a writer acts between the listing and the delete.
var purgeBeforeDelete func(shard string)

// adminPurge deletes the shards under prefix idle for longer than age:
// whose last commit (or, without one, creation) is before now-age. A shard
// whose age is not recorded (written by a build before these times) is
// skipped and counted. Each delete passes the last seq the listing saw. A
// deleted shard is deleted again, which finishes reclaiming its storage.
func adminPurge(ctx context.Context, c *client.Client, stdout, stderr io.Writer, prefix string, age time.Duration, dryRun bool, now time.Time) error {
	p := &purge{c: c, stdout: stdout, stderr: stderr, dryRun: dryRun, cutoff: now.Add(-age), verb: "deleted"}
	if dryRun {
		p.verb = "would delete"
	}
	for s, err := range c.AllShards(ctx, prefix, 1000, true) {
		if err != nil {
			return callError("admin purge: list shards", err)
		}
		p.examined++
		p.shard(ctx, s)
	}
	if p.examined == 0 {
		if err := wrongPrefix(ctx, "admin purge", clientLister(c), prefix); err != nil {
			return err
		}
	}
	p.summary(prefix, age)
	if p.failed > 0 {
		return fmt.Errorf("admin purge: %d shards failed", p.failed)
	}
	return nil
}

// purge is one run of adminPurge: where it prints, and what it counted.
type purge struct {
	c              *client.Client
	stdout, stderr io.Writer
	dryRun         bool
	cutoff         time.Time
	verb           string // "deleted", or in a dry run "would delete"

	examined, deleted, records, resumed, unknown, young, moved, failed int
}

// shard purges s, one shard of the listing, if it is older than the
// cutoff, and finishes its deletion if it is deleted.
func (p *purge) shard(ctx context.Context, s *rolloutv1.ListedShard) {
	sum := s.GetSummary()
	if e := s.GetSummaryError(); e != "" {
		// Its age is unknown: keep it, say so, and go on.
		p.failed++
		fmt.Fprintf(p.stderr, "purge: %s: cannot read its summary: %s\n", s.GetShard(), e)
		return
	}
	if sum == nil {
		return // gone between the listing and its read
	}
	if sum.GetDeleted() {
		p.resume(ctx, s.GetShard(), sum)
		return
	}
	last := sum.GetLastCommitAt()
	if last == nil {
		last = sum.GetCreatedAt()
	}
	switch {
	case last == nil:
		p.unknown++
		return
	case !last.AsTime().Before(p.cutoff):
		p.young++
		return
	}
	if p.dryRun {
		p.deleted++
		p.records += int(sum.GetRecords())
		fmt.Fprintf(p.stdout, "%s %s: %d records through seq %d, last commit %s\n", p.verb, s.GetShard(), sum.GetRecords(), sum.GetLastSeq(), when(last.AsTime(), true))
		return
	}
	p.delete(ctx, s.GetShard(), sum.GetLastSeq(), last)
}

// resume finishes the deletion of shard, listed deleted with sum.
func (p *purge) resume(ctx context.Context, shard string, sum *rolloutv1.ShardInfo) {
	if !p.dryRun {
		if purgeBeforeDelete != nil {
			purgeBeforeDelete(shard)
		}
		// With the last seq the listing saw, so that a shard
		// written again since (its next incarnation) survives: a
		// delete of a tombstone only resumes reclaiming storage,
		// and the last seq of a shard written since is higher.
		seq := sum.GetLastSeq()
		_, err := p.c.DeleteShard(ctx, shard, &seq)
		switch {
		case errors.Is(err, client.ErrSeqMismatch):
			p.moved++
			fmt.Fprintf(p.stdout, "kept %s: written again since it was listed deleted\n", shard)
			return
		case err != nil:
			p.failed++
			fmt.Fprintf(p.stderr, "purge: %s: finishing its deletion: %v\n", shard, callError("", err))
			return
		}
	}
	p.resumed++
	resumeVerb := "resumed reclaiming"
	if p.dryRun {
		resumeVerb = "would resume reclaiming"
	}
	fmt.Fprintf(p.stdout, "%s %s: deleted %s\n", resumeVerb, shard, when(sum.GetDeletedAt().AsTime(), sum.GetDeletedAt() != nil))
}

// delete deletes shard, listed with last seq seq and last commit (or
// creation) last, unless it was written since.
func (p *purge) delete(ctx context.Context, shard string, seq uint64, last *timestamppb.Timestamp) {
	if purgeBeforeDelete != nil {
		purgeBeforeDelete(shard)
	}
	resp, err := p.c.DeleteShard(ctx, shard, &seq)
	switch {
	case errors.Is(err, client.ErrSeqMismatch):
		p.moved++
		if errors.Is(err, client.ErrOutcomeUnknown) {
			fmt.Fprintf(p.stdout, "kept %s: written since it was listed (an earlier attempt of this delete may have deleted its records through seq %d)\n", shard, seq)
		} else {
			fmt.Fprintf(p.stdout, "kept %s: written since it was listed\n", shard)
		}
	case errors.Is(err, client.ErrNotFound):
	case err != nil:
		p.failed++
		fmt.Fprintf(p.stderr, "purge: %s: %v\n", shard, callError("", err))
	default:
		p.deleted++
		p.records += int(resp.GetRecords())
		fmt.Fprintf(p.stdout, "%s %s: %d records through seq %d, last commit %s\n", p.verb, shard, resp.GetRecords(), resp.GetLastSeq(), when(last.AsTime(), true))
	}
}

// summary prints purge's last line: what it examined and what it did.
func (p *purge) summary(prefix string, age time.Duration) {
	scope := fmt.Sprintf("%q", prefix)
	if prefix == "" {
		scope = "every shard"
	}
	fmt.Fprintf(p.stdout, "purge of %s, older than %s (before %s): %d shards examined, %d %s (%d records), %d younger, %d written since listed, %d of unknown age, %d deleted before (storage reclaim %s), %d failed\n",
		scope, ageString(age), p.cutoff.UTC().Format(time.RFC3339), p.examined, p.deleted, p.verb, p.records, p.young, p.moved, p.unknown, p.resumed, map[bool]string{true: "not resumed: dry run", false: "resumed"}[p.dryRun], p.failed)
}

// ageString is age as --older-than takes it: whole days as "30d".
func ageString(age time.Duration) string {
	const day = 24 * time.Hour
	if age >= day && age%day == 0 {
		return fmt.Sprintf("%dd", age/day)
	}
	// 36h, not 36h0m0s.
	str := age.String()
	if strings.HasSuffix(str, "m0s") {
		str = strings.TrimSuffix(str, "0s")
	}
	if strings.HasSuffix(str, "h0m") {
		str = strings.TrimSuffix(str, "0m")
	}
	return str
}

// parseAge is time.ParseDuration, plus whole days ("30d").
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(d, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q: want a duration such as 36h or a number of days such as 30d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 36h or a number of days such as 30d", s)
	}
	return d, nil
}
