#!/usr/bin/python3
"""A toy asyncio rollout worker: it plays a few rollouts concurrently, appends
each turn as it happens, then a grade with the reward.

    make run                                    # a rolloutd on localhost:50051
    /usr/bin/python3 examples/python/worker.py --shard demo/actor-0 --rollouts 4

(with the client installed, or PYTHONPATH=clients/python). Follow the shard
with trainer.py in another terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import uuid

import rolloutd
import rolloutd.aio


async def rollout(client: rolloutd.aio.Client, shard: str, problem: int, policy: str) -> float:
    """One episode: a prompt, a few assistant/tool turns, and a grade."""
    rollout_id = "rollout-" + uuid.uuid4().hex[:8]
    a, b = random.randint(1, 9), random.randint(1, 9)
    turns = [{"role": "user", "content": "What is %d+%d?" % (a, b)}]
    answer = a + b + random.choice([0, 0, 1])  # a policy that is sometimes wrong
    turns.append({"role": "assistant", "content": "Let me add them.", "output_tokens": [11, 12, 13], "output_logprobs": [-0.1, -0.2, -0.05]})
    turns.append({"role": "assistant", "content": str(answer), "output_tokens": [14], "output_logprobs": [-0.3]})
    for i, t in enumerate(turns):
        # Each turn is durable once append returns; a retried append stores it once.
        await client.append(shard, [dict(t, rollout_id=rollout_id, problem_id="add-%d" % problem, sequence_order=i, policy_version=policy)])
        await asyncio.sleep(random.uniform(0.01, 0.05))  # the "model" thinking
    reward = 1.0 if answer == a + b else 0.0
    await client.append(shard, [{
        "rollout_id": rollout_id, "problem_id": "add-%d" % problem, "role": "grade", "grader_id": "exact-match",
        "reward": reward, "include_in_training": True, "sequence_order": len(turns),
    }])
    return reward


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--shard", default="demo/actor-0")
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--policy", default="policy-v1")
    args = ap.parse_args()
    async with rolloutd.aio.Client(args.target) as client:
        rewards = await asyncio.gather(*(rollout(client, args.shard, i, args.policy) for i in range(args.rollouts)))
    print("appended %d rollouts to %s, mean reward %.2f" % (len(rewards), args.shard, sum(rewards) / len(rewards)))


if __name__ == "__main__":
    asyncio.run(main())
