#!/usr/bin/python3
"""A toy trainer: it follows a shard and prints each grade's reward as it
lands, with the cursor to checkpoint.

    /usr/bin/python3 examples/python/trainer.py --shard demo/actor-0

Restart it with --after-seq set to the last cursor it printed to continue
where it left off; the scan itself reconnects and resumes across a server
restart, so it sees every grade exactly once.
"""

from __future__ import annotations

import argparse

import rolloutd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--shard", default="demo/actor-0")
    ap.add_argument("--after-seq", type=int, default=0, help="resume after this cursor")
    ap.add_argument("--count", type=int, default=0, help="stop after this many grades (0: follow forever)")
    args = ap.parse_args()
    with rolloutd.Client(args.target) as client:
        with client.scan(args.shard, after_seq=args.after_seq, follow=True, role="grade", include_in_training=True) as grades:
            n = 0
            try:
                for g in grades:
                    n += 1
                    print("rollout %s problem %s reward %.1f (cursor %d)" % (g.rollout_id, g.problem_id, g.reward or 0.0, grades.cursor), flush=True)
                    if args.count and n >= args.count:
                        break
            except KeyboardInterrupt:
                pass
            print("checkpoint: --after-seq %d" % grades.cursor)


if __name__ == "__main__":
    main()
