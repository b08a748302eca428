package server

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The race hunter's fault families beyond its background chaos: each is a
// scenario (faults, the operations they need, and the invariants they
// check), found by a review after the background chaos had missed them.
// ROLLOUTD_HUNT_ONLY picks some, to measure one alone.

// huntFamily is one family of scenarios; its name tags its violations.
type huntFamily int

const (
	// famPartition: a store partition longer than CommitTimeout, then a
	// heal; the shard must not stay wedged (finding 1 of docs/reliability.md).
	famPartition huntFamily = iota
	// famLateFence: BatchGet and Get beside a fence created late into a
	// position merge and GC collected; no DATA_LOSS (finding 2).
	famLateFence
	// famDelete: conditional deletes racing the fenced writers' self-heal,
	// with the tombstone CAS's answer lost; the answer must match the
	// final incarnation (finding 3).
	famDelete
	// famLagBound: commits held at the 2K lag bound by slow checkpoints,
	// then a takeover; no commit waits long after its writer stopped
	// (finding 4).
	famLagBound
	numHuntFamilies
)

var huntFamilyNames = [numHuntFamilies]string{"partition", "latefence", "delete", "lagbound"}

func (f huntFamily) String() string { return huntFamilyNames[f] }

// tag heads a violation's message with its family and the finding it
// guards, so that a failed run says which bug it found.
func (f huntFamily) tag() string { return fmt.Sprintf("[%s, finding %d]", f, int(f)+1) }

// huntFamilies says which families run.
type huntFamilies [numHuntFamilies]bool

// huntFamiliesFromEnv parses ROLLOUTD_HUNT_ONLY: empty runs every family, a
// comma-separated list of names runs those, "none" only the background
// chaos.
func huntFamiliesFromEnv(s string) (huntFamilies, error) {
	var fams huntFamilies
	switch s {
	case "":
		for i := range fams {
			fams[i] = true
		}
		return fams, nil
	case "none":
		return fams, nil
	}
	for _, name := range strings.Split(s, ",") {
		i := -1
		for f, n := range huntFamilyNames {
			if n == strings.TrimSpace(name) {
				i = f
			}
		}
		if i < 0 {
			return fams, fmt.Errorf("ROLLOUTD_HUNT_ONLY=%q: %q is none of %s, none", s, name, strings.Join(huntFamilyNames[:], ", "))
		}
		fams[i] = true
	}
	return fams, nil
}

// huntScenarioFloor: a scenario starts only this long before the chaos
// stops, so that it ends about when the run does; a late fence waits for
// merge and GC, which take a few seconds under the chaos.
var huntScenarioFloor = [numHuntFamilies]time.Duration{600 * time.Millisecond, 2 * time.Second, 600 * time.Millisecond, 600 * time.Millisecond}

// family runs scenarios of f, one at a time, beside the chaos, until the
// run has too little time left for one.
func (h *hunter) family(f huntFamily) {
	run := [numHuntFamilies]func(){h.partition, h.lateFence, h.deleteRace, h.lagBound}[f]
	for !h.stopped() {
		time.Sleep(h.rng.between(0, 100*time.Millisecond))
		if time.Until(h.end) < huntScenarioFloor[f] {
			return
		}
		h.count(f.String())
		run()
	}
}

// violate records a broken invariant of family f.
func (h *hunter) violate(f huntFamily, format string, args ...any) {
	h.v.add(f.tag()+" "+format, args...)
}

// huntWaitFor polls cond until it holds or d passed.
func huntWaitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// retireInstance closes a writer set a scenario started for itself.
func (h *hunter) retireInstance(svc *service) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	svc.writers.closeAll(ctx)
	cancel()
	h.stopPurger(svc)
}
