#!/usr/bin/python3
"""A toy trainer: it consumes the grades of every shard under a prefix as a
named consumer, "trains" on each batch, and commits its positions after
each step.

    /usr/bin/python3 examples/python/trainer.py --prefix demo --consumer trainer

Run one per rank: --member and --members (default: the RANK and WORLD_SIZE
environment variables of torchrun and friends) split the shards between
ranks, each rank reading a stable, disjoint share with no coordinator.
Restart it with the same --consumer to continue after the positions it
committed; the subscription itself resumes across a server restart, so it
sees every grade, and after a crash repeats at most the step it had not
committed.
"""

from __future__ import annotations

import argparse
import os

import rolloutd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--prefix", default="demo", help="consume every shard under this prefix")
    ap.add_argument("--consumer", default="trainer", help="the consumer whose positions to start from and commit")
    ap.add_argument("--member", type=int, default=int(os.environ.get("RANK", "0")), help="this rank (default: $RANK)")
    ap.add_argument("--members", type=int, default=int(os.environ.get("WORLD_SIZE", "1")), help="how many ranks (default: $WORLD_SIZE)")
    ap.add_argument("--start", choices=["earliest", "latest", "consumer"], default=None,
                    help="where to start without stored positions (default: the consumer's, else earliest)")
    ap.add_argument("--count", type=int, default=0, help="stop after this many grades (0: follow forever)")
    args = ap.parse_args()
    with rolloutd.Client(args.target) as client:
        sub = client.subscribe(args.prefix, consumer=args.consumer, start=args.start, member=args.member, members=args.members,
                               role="grade", include_in_training=True)
        with sub:
            print("consumer %s rank %d/%d: started from generation %d" % (args.consumer, args.member, args.members, sub.consumer_generation), flush=True)
            n = 0
            try:
                for batch in sub:
                    if batch.deleted:
                        print("shard %s was deleted" % batch.shard, flush=True)
                    # One training step: here, printing the rewards.
                    step = batch.records[: args.count - n] if args.count else batch.records
                    for g in step:
                        print("%s rollout %s problem %s reward %.1f" % (batch.shard, g.rollout_id, g.problem_id, g.reward or 0.0), flush=True)
                    n += len(step)
                    if len(step) == len(batch.records):
                        # The step is done: commit, so that a restart
                        # resumes after it.
                        batch.commit()
                    if args.count and n >= args.count:
                        break
            except KeyboardInterrupt:
                pass
            try:
                info = client.describe_consumer(args.prefix, args.consumer, include_positions=True)
                print("consumer %s committed: %s" % (args.consumer, dict(sorted(info.positions.items()))))
            except rolloutd.NotFound:
                print("consumer %s committed nothing yet" % args.consumer)


if __name__ == "__main__":
    main()
