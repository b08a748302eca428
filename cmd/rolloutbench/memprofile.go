package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
)

// heapSnapshot, for --memprofile, forces a GC and writes a heap profile to
// PREFIX.PHASE.WHEN, then notes the live heap and what the runtime holds
// from the OS. It runs after the RSS reading it accompanies, so the GC it
// forces cannot lower that reading; it tells growth of live memory (a
// leak, an unbounded cache) from garbage not yet collected or returned.
func (p *phase) heapSnapshot(when string) {
	prefix := p.b.cfg.MemProfile
	if prefix == "" {
		return
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	name := strings.NewReplacer(" ", "_", "/", "_", ",", "_").Replace(p.spec.Name)
	path := fmt.Sprintf("%s.%s.%s", prefix, name, when)
	f, err := os.Create(path)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.note("--memprofile: " + err.Error())
		return
	}
	cache := "unknown"
	if p.spec.Figures != nil {
		if f, err := p.spec.Figures(); err == nil {
			cache = mib(f.CacheBytes)
		}
	}
	// What VmRSS would be with every free page returned: the live part of
	// the reading taken just before.
	debug.FreeOSMemory()
	p.note(fmt.Sprintf("heap after GC at %s: blob cache %s, HeapInuse %s, HeapAlloc %s, HeapSys %s, HeapReleased %s, Sys %s, goroutines %d; VmRSS after FreeOSMemory %s (%s)",
		when, cache, mib(float64(ms.HeapInuse)), mib(float64(ms.HeapAlloc)), mib(float64(ms.HeapSys)), mib(float64(ms.HeapReleased)), mib(float64(ms.Sys)), runtime.NumGoroutine(), mib(selfRSS()), path))
}
