package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rolloutd/rolloutd/internal/term"
)

// progress shows a phase's live figures: one line rewritten in place on a
// terminal, a plain line every few seconds otherwise (logs, CI), or nothing.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	off      bool
	last     time.Time
	shown    bool
	interval time.Duration
}

func newProgress(w io.Writer, mode string) *progress {
	p := &progress{w: w, interval: 5 * time.Second}
	switch mode {
	case "off":
		p.off = true
	case "plain":
	default:
		p.tty = term.IsTerminal(w)
	}
	return p
}

func (p *progress) show(line string) {
	if p == nil || p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.shown = true
		return
	}
	if time.Since(p.last) >= p.interval {
		p.last = time.Now()
		fmt.Fprintln(p.w, line)
	}
}

// clear ends a phase's live line.
func (p *progress) clear() {
	if p == nil || p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wipe()
}

// say prints a line between phases.
func (p *progress) say(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wipe()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// wipe erases the live line, if one shows; p.mu is held.
func (p *progress) wipe() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}
