package main

import (
	"context"
	"fmt"
	"strings"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Target 5: a strong Get from another instance than the one that wrote,
// against the read floor, and how it scales with the shard's records.

// t5Get is target 5's Get against its read floor.
type t5Get struct {
	floor *phaseResult // nil without a store
	get   phaseResult
}

// t5Scale is target 5's Gets on a big shard and on a small one.
type t5Scale struct {
	fills      []phaseResult // the two shards' fills, big first
	big, small phaseResult
}

func runTarget5(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	b.progress.say("target 5: Get (strong) from another instance vs the read floor (manifest GET + ranged GET)")
	g, err := b.target5(ctx)
	if err != nil {
		return nil, err
	}
	o := &outcome{}
	if g.floor != nil {
		floor := *g.floor
		o.phases = []phaseResult{floor, g.get}
		detail := fmt.Sprintf("%s vs %s", ms(getP50(g.get)), ms(getP50(floor)))
		o.rows = []targetCheck{check("5", "Get from another instance: p50 / read floor p50", getP50(g.get)/getP50(floor), "<=", 1.3, detail),
			check("5b", "commit by create: Get from another instance: p50 / two-read floor p50 (5's figure)", getP50(g.get)/getP50(floor), "<=", 1.6, detail)}
	} else {
		o.phases = []phaseResult{g.get}
		o.rows = []targetCheck{skipped("5", "Get from another instance: p50 / read floor p50", "<=", 1.3, "the read floor needs --store"),
			skipped("5b", "commit by create: Get from another instance: p50 / two-read floor p50", "<=", 1.6, "the read floor needs --store")}
	}
	b.progress.say("target 5, scale: Get from another instance on a shard of %d records vs one of %d", sz.GetBigRecords, sz.GetSmallRecords)
	sc, err := b.target5Scale(ctx)
	if err != nil {
		return nil, err
	}
	o.phases = append(append(o.phases, sc.fills...), sc.big, sc.small)
	o.rows = append(o.rows, check("5c", fmt.Sprintf("commit by create: Get from another instance: p50 at %d records / p50 at %d records", sz.GetBigRecords, sz.GetSmallRecords),
		getP50(sc.big)/getP50(sc.small), "<=", 1.25, fmt.Sprintf("%s vs %s", ms(getP50(sc.big)), ms(getP50(sc.small)))))
	return o, nil
}

// target5 appends records through one instance, then measures Gets through
// another (its own server and caches and, on Azure, its own client) against
// the read floor on that instance's client.
func (b *bench) target5(ctx context.Context) (t5Get, error) {
	sz := b.cfg.sizes
	sh := b.base() + "/t5"
	ids, stopWriter, err := b.target5Populate(ctx, sh)
	if err != nil {
		return t5Get{}, err
	}
	defer stopWriter()
	// The other instance.
	readStore, drop, err := b.secondStore(ctx)
	if err != nil {
		return t5Get{}, err
	}
	defer drop()
	note := ""
	if b.cfg.InProcess && b.cfg.store.Kind != "azblob" {
		note = "the second instance shares the store handle (a local store opens once per process)"
	}
	reader, err := b.resident(readStore, b.cfg.MaxWriters, b.getTarget)
	if err != nil {
		return t5Get{}, err
	}
	defer reader.stop()
	if b.cfg.Target != "" && b.cfg.GetTarget == "" {
		note = "no --get-target: Gets go to the same rolloutd that wrote"
	}
	s := b.spec("T5 Get, other instance", modeResident, reader.path, 1, []string{sh})
	s.NewClient, s.Figures, s.ReadFraction, s.ReadIDs = grpcClients(reader.conn), reader.figures, 1, ids
	getP, err := b.newPhase(s)
	if err != nil {
		return t5Get{}, err
	}
	defer getP.close()
	if note != "" {
		getP.note(note)
	}
	if b.store == nil {
		warm(ctx, 20, getP)
		getP.run(ctx, int64(sz.Gets), 0)
		return t5Get{get: getP.result()}, nil
	}
	floorP, err := b.target5ReadFloor(ctx, readStore, sh, ids)
	if err != nil {
		return t5Get{}, err
	}
	defer floorP.close()
	warm(ctx, 20, floorP, getP)
	interleave(ctx, int64(sz.Gets), sz.Gets/10, floorP, getP)
	return t5Get{floor: resultOf(floorP), get: getP.result()}, nil
}

// target5Populate appends GetRecords records to sh through one instance
// and returns their ids, and stop, which stops that instance: it stays up
// while the other instance reads, as a deployment's would.
func (b *bench) target5Populate(ctx context.Context, sh string) (ids []idRef, stop func(), err error) {
	writer, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			writer.stop()
		}
	}()
	s := b.spec("T5 populate", modeResident, writer.path, 8, []string{sh})
	s.NewClient, s.KeepIDs = grpcClients(writer.conn), true
	fill, err := b.newPhase(s)
	if err != nil {
		return nil, nil, err
	}
	fill.run(ctx, int64(b.cfg.sizes.GetRecords), 0)
	ids = fill.ackedIDs()
	fill.close()
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("target 5: no record appended (%v)", fill.result().FirstErrors)
	}
	return ids, writer.stop, nil
}

// target5ReadFloor is the read floor of shard sh on the reading
// instance's store: its manifest's GET and a ranged GET of a record.
func (b *bench) target5ReadFloor(ctx context.Context, readStore blob.Store, sh string, ids []idRef) (*phase, error) {
	raw, _, err := readStore.Get(ctx, format.ManifestName(sh), blob.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("target 5: read manifest: %w", err)
	}
	m, err := format.DecodeManifest(raw)
	if err != nil {
		return nil, err
	}
	fs := &floorSpec{prefix: b.base() + "/floor/t5", readShard: sh, readBytes: int64(len(b.content))}
	if fs.readGens, err = readableBlobs(ctx, readStore, sh, m); err != nil {
		return nil, err
	}
	if fs.generation, err = generationBlob(sh, []*rolloutv1.Record{b.newRecord(0)}); err != nil {
		return nil, err
	}
	if fs.manifest, err = freshManifest(); err != nil {
		return nil, err
	}
	c := newOpCounter()
	fs.store = c.wrap(readStore)
	s := b.spec("T5 read floor", modeFloor, "raw blob ops: GET of the shard's manifest + one ranged GET of a record's bytes, sequential, on the reading instance's client", 1, []string{sh})
	s.NewClient, s.Figures, s.ReadFraction, s.ReadIDs = floorClients(fs), c.figures, 1, ids
	return b.newPhase(s)
}

// secondStore is the store another instance reads through: in-process on
// Azure a client of its own; otherwise the shared one (a local store opens
// once per process). drop releases it.
func (b *bench) secondStore(ctx context.Context) (st blob.Store, drop func(), err error) {
	if b.cfg.InProcess && b.cfg.store.Kind == "azblob" {
		st, closeStore, err := b.newStoreForAppend(ctx)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = closeStore() }, nil
	}
	return b.store, func() {}, nil
}

// target5Scale appends GetBigRecords small records to one shard and
// GetSmallRecords to another through one instance, then measures Gets of
// each through another instance (its own server and caches and, on Azure,
// its own client), interleaved.
func (b *bench) target5Scale(ctx context.Context) (t5Scale, error) {
	sz := b.cfg.sizes
	base := b.base() + "/t5s"
	writer, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return t5Scale{}, err
	}
	defer writer.stop()
	var out t5Scale
	bigShard, smallShard := base+"-big", base+"-small"
	bigIDs, err := b.target5Fill(ctx, writer, &out, bigShard, sz.GetBigRecords)
	if err != nil {
		return t5Scale{}, err
	}
	smallIDs, err := b.target5Fill(ctx, writer, &out, smallShard, sz.GetSmallRecords)
	if err != nil {
		return t5Scale{}, err
	}

	readStore, drop, err := b.secondStore(ctx)
	if err != nil {
		return t5Scale{}, err
	}
	defer drop()
	reader, err := b.resident(readStore, b.cfg.MaxWriters, b.getTarget)
	if err != nil {
		return t5Scale{}, err
	}
	defer reader.stop()
	var gets []*phase
	for _, g := range []struct {
		records int
		sh      string
		ids     []idRef
	}{{sz.GetBigRecords, bigShard, bigIDs}, {sz.GetSmallRecords, smallShard, smallIDs}} {
		s := b.spec(fmt.Sprintf("T5 Get at %d records", g.records), modeResident, reader.path, 1, []string{g.sh})
		s.NewClient, s.Figures, s.ReadFraction, s.ReadIDs = grpcClients(reader.conn), reader.figures, 1, g.ids
		p, err := b.newPhase(s)
		if err != nil {
			return t5Scale{}, err
		}
		defer p.close()
		gets = append(gets, p)
	}
	warm(ctx, 20, gets...)
	interleave(ctx, int64(sz.Gets), sz.Gets/10, gets...)
	out.big, out.small = gets[0].result(), gets[1].result()
	return out, nil
}

// target5Fill appends records small records to sh through writer, many to
// an append: the fill is about the shard's shape (records, generations,
// merges), not about its bytes, which in-memory Azurite would have to hold
// several times over as merges rewrite them. It adds the fill's result to
// out and returns the ids.
func (b *bench) target5Fill(ctx context.Context, writer *resident, out *t5Scale, sh string, records int) ([]idRef, error) {
	sz := b.cfg.sizes
	batch := max(1, sz.GetFillBatch)
	name := fmt.Sprintf("T5 fill %d records", records)
	s := b.spec(name, modeResident, writer.path, min(32, max(1, records/batch)), []string{sh})
	s.NewClient, s.Figures, s.KeepIDs, s.Records, s.RecordBytes = smallRecords(grpcClients(writer.conn), sz.GetFillBytes), writer.figures, true, batch, sz.GetFillBytes
	p, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	defer p.close()
	p.run(ctx, int64((records+batch-1)/batch), 0)
	r := p.result()
	out.fills = append(out.fills, r)
	if r.ErrorsTotal > 0 || len(p.ackedIDs()) == 0 {
		return nil, fmt.Errorf("%s: %d errors (%v)", name, r.ErrorsTotal, r.FirstErrors)
	}
	return p.ackedIDs(), nil
}

// smallRecords sends records with n bytes of content instead of the run's.
func smallRecords(next func(int) (clientOps, error), n int) func(int) (clientOps, error) {
	content := strings.Repeat("s", n)
	return func(i int) (clientOps, error) {
		ops, err := next(i)
		if err != nil {
			return ops, err
		}
		inner := ops.append
		ops.append = func(ctx context.Context, sh string, recs []*rolloutv1.Record) error {
			for _, r := range recs {
				r.Content = content
			}
			return inner(ctx, sh, recs)
		}
		return ops, nil
	}
}

// readableBlobs names the blobs that hold the shard's records: the
// generations its manifest lists (a log batch, under protocol v2, by its
// position) and, under v2, the log positions past the checkpoint, which hold
// the records no checkpoint lists yet.
func readableBlobs(ctx context.Context, st blob.Store, sh string, m *storagepb.Manifest) ([]string, error) {
	var names []string
	for _, g := range m.GetGenerations() {
		names = append(names, format.KeyOf(g).Blob(sh))
	}
	for token := ""; ; {
		page, err := st.List(ctx, blob.ListOptions{Prefix: format.LogPrefix(sh), Token: token})
		if err != nil {
			return nil, fmt.Errorf("target 5: list the log: %w", err)
		}
		for _, it := range page.Items {
			if p, ok := format.ParseLogName(sh, it.Name); ok && p > m.GetLogCheckpoint() {
				names = append(names, it.Name)
			}
		}
		if token = page.Next; token == "" {
			return names, nil
		}
	}
}
