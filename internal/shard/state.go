package shard

import (
	"fmt"
	"slices"
)

// state is where a writer is in its life. Every change of state goes
// through toLocked, which allows only these transitions:
//
//	open    ──Close──────────────────────────▶ closing
//	open    ──Abort, or the handle dropped───▶ aborted
//	open    ──a higher epoch found───────────▶ fenced
//	closing ──the committer drained──────────▶ closed
//	closing ──Abort, or Close's ctx ended────▶ aborted
//	closing ──a higher epoch found───────────▶ fenced
//
// closed, aborted and fenced are final. What each verb answers in each
// state is in the doc of Append, Close, Abort and Err, and in
// TestStateMachineAnswers.
type state int

const (
	stateOpen state = iota
	stateClosing
	stateClosed
	stateAborted
	stateFenced
)

func (s state) String() string {
	switch s {
	case stateOpen:
		return "open"
	case stateClosing:
		return "closing"
	case stateClosed:
		return "closed"
	case stateAborted:
		return "aborted"
	case stateFenced:
		return "fenced"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// transitions lists, for each state, the states it may move to.
var transitions = map[state][]state{
	stateOpen:    {stateClosing, stateAborted, stateFenced},
	stateClosing: {stateClosed, stateAborted, stateFenced},
}

// toLocked moves the writer to next if that is a transition of the state
// machine, and reports whether it did. The caller holds mu.
func (w *writer) toLocked(next state) bool {
	if !slices.Contains(transitions[w.state], next) {
		return false
	}
	w.state = next
	return true
}
