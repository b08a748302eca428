// Package reliability is rolloutd's reliability suite. It holds only tests:
// they try hard to make rolloutd lose, duplicate or misreport an
// acknowledged append, and check after every run that it did not.
//
// The scenarios, the invariants and how to run a soak are in
// docs/reliability.md. In short:
//
//   - TestSimulatedFaults: seeded fault simulation through the real gRPC
//     server (two instances, a tiny writer LRU, merges, GC, forced fences,
//     crash restarts) over a store that fails, delays, hangs and loses
//     responses on every operation kind.
//   - TestLinearizable: per-shard Append/Get histories under faults, checked
//     with porcupine against a sequential model of a shard.
//   - TestNetworkFaults: toxiproxy between an in-process rolloutd and
//     Azurite (latency jitter, resets, timeouts, bandwidth limits, slow
//     closes).
//   - TestCrashRestart, TestContention, TestGracefulShutdown: the real
//     binary (built once per run, with -race when the tests have it) on
//     Azurite, killed with SIGKILL, run twice side by side, and stopped with
//     SIGTERM under load.
//   - TestSubscribeDeliversEverythingAcked: three real processes, a
//     consumer of two members over a prefix, a member and an instance
//     killed: every stored record is delivered, in order, duplicated only
//     in the killed member's uncommitted window (ROLLOUTD_SUBSCRIBE_LONG=1
//     for the full size).
//   - TestBadInput and TestCorruptStoredBytes: every kind of bad value, per
//     RPC field, over gRPC; damaged blobs read back as DataLoss or intact.
//
// Every randomized run logs the seed that drives its choices, and a failing
// one prints how to rerun it (ROLLOUTD_SIM_SEED). ROLLOUTD_SOAK=10m makes
// each scenario repeat with fresh seeds until the duration has passed.
package reliability
