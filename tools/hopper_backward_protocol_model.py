#!/usr/bin/env python3
"""A model of the synchronisation of variant 3 of the Hopper attention backward
(src/backend/cuda/hopper_attention_backward.cu, the `V == 3` consumer loop): two consumer warpgroups
that share the dS^T tiles of a pair but are coupled one pair late through named barriers
ready_bar(c, n % 3), and the ring of NS stages that the producer fills. It steps the two consumers and
the producer in random interleavings and checks, for d = 128 (both consumers compute a half of dQ)
and d = 64 (consumer 0 alone):
  - every dQ reads both halves of its own pair's dS^T (written, not yet overwritten), and no dS^T
    buffer is rewritten while a dQ still reads it;
  - a stage is read only while it holds the pair being computed;
  - a named barrier never completes on two arrivals of the same consumer (hardware barriers count
    threads, not pairs: that would pair the wrong arrivals);
  - no deadlock, and every barrier ends with no arrival left over.
A deliberately wrong protocol (2 dS^T buffers, or one barrier per consumer instead of one per buffer)
must fail, so the checks can fail. It models the protocol, not the CUDA source or the hardware.
  python3 tools/hopper_backward_protocol_model.py      (a few seconds)
"""
import random
import sys


class Violation(Exception):
    pass


def consumer_program(c, n_pairs, dq, bufs, per_buffer_bars):
    """The steps of consumer c, as the kernel's V == 3 loop orders them."""
    bar = (lambda cc, b: (cc, b)) if per_buffer_bars else (lambda cc, b: (cc, 0))
    for n in range(n_pairs):
        yield ("wait_full", n)
        yield ("read_stage", n)  # scores and gradients read Q, dO of the stage
        yield ("write_ds", n, n % bufs)
        if n > 0:
            yield ("sync", bar(1 - c, (n - 1) % bufs))
        if dq:  # the dQ of pair n - 1 (n = 0: a stale buffer, discarded, so nothing is checked)
            yield ("dq_start", n - 1, (n - 1) % bufs)
        yield ("release", n)
        if dq:
            yield ("dq_end", n - 1, (n - 1) % bufs)
        yield ("arrive", bar(c, n % bufs))
    if n_pairs > 0:
        yield ("sync", bar(1 - c, (n_pairs - 1) % bufs))
        if dq:
            yield ("dq_start", n_pairs - 1, (n_pairs - 1) % bufs)
            yield ("dq_end", n_pairs - 1, (n_pairs - 1) % bufs)


def run(n_pairs, d, NS, bufs, per_buffer_bars, rng):
    dq_consumers = [True, True] if d == 128 else [True, False]
    progs = [consumer_program(c, n_pairs, dq_consumers[c], bufs, per_buffer_bars) for c in range(2)]
    pending = [next(p, None) for p in progs]
    stage = [None] * NS          # pair held by each stage
    released = {}                # pair -> consumers that released it
    loaded = 0                   # pairs the producer has loaded
    ds = [[None, None] for _ in range(bufs)]   # per buffer, per consumer half: pair written
    readers = [set() for _ in range(bufs)]     # consumers whose dQ reads the buffer now
    bars = {}                    # barrier -> list of consumers counted in its current instance
    waiting = [None, None]       # barrier a consumer blocks on (after counting itself)
    generation = {}              # barrier -> completions, to release sync waiters

    def count(b, c):
        inst = bars.setdefault(b, [])
        inst.append(c)
        if len(inst) == 2:
            if inst[0] == inst[1]:
                raise Violation(f"barrier {b} completed on two arrivals of consumer {c}")
            bars[b] = []
            generation[b] = generation.get(b, 0) + 1
            return True
        return False

    def runnable(c):
        step = pending[c]
        if step is None:
            return False
        if waiting[c] is not None:
            b, gen = waiting[c]
            return generation.get(b, 0) > gen
        if step[0] == "wait_full":
            n = step[1]
            return loaded > n
        return True

    producer_can = lambda: loaded < n_pairs and (loaded < NS or len(released.get(loaded - NS, ())) == 2)

    while True:
        actors = [c for c in range(2) if runnable(c)] + (["p"] if producer_can() else [])
        if not actors:
            break
        a = rng.choice(actors)
        if a == "p":
            stage[loaded % NS] = loaded
            loaded += 1
            continue
        c = a
        if waiting[c] is not None:  # the barrier it waited on completed
            waiting[c] = None
            pending[c] = next(progs[c], None)
            continue
        step = pending[c]
        kind = step[0]
        if kind == "read_stage":
            n = step[1]
            if stage[n % NS] != n:
                raise Violation(f"consumer {c} reads stage {n % NS} for pair {n}, which holds {stage[n % NS]}")
        elif kind == "write_ds":
            n, b = step[1], step[2]
            if readers[b]:
                raise Violation(f"consumer {c} rewrites dS^T buffer {b} (pair {n}) while {readers[b]} read it")
            ds[b][c] = n
        elif kind == "dq_start":
            n, b = step[1], step[2]
            if n >= 0:
                if ds[b] != [n, n]:
                    raise Violation(f"consumer {c}'s dQ of pair {n} finds buffer {b} holding {ds[b]}")
                readers[b].add(c)
        elif kind == "dq_end":
            n, b = step[1], step[2]
            if n >= 0:
                if ds[b] != [n, n]:
                    raise Violation(f"buffer {b} overwritten during consumer {c}'s dQ of pair {n}: {ds[b]}")
                readers[b].discard(c)
        elif kind == "release":
            n = step[1]
            if stage[n % NS] != n:
                raise Violation(f"stage {n % NS} overwritten before consumer {c} released pair {n}")
            released.setdefault(n, set()).add(c)
        elif kind == "arrive":
            count(step[1], c)
        elif kind == "sync":
            b = step[1]
            gen = generation.get(b, 0)
            if not count(b, c):
                waiting[c] = (b, gen)
                continue
        pending[c] = next(progs[c], None)

    if any(p is not None for p in pending) or loaded < n_pairs:
        raise Violation(f"deadlock: consumers at {pending}, {loaded} of {n_pairs} pairs loaded")
    left = {b: v for b, v in bars.items() if v}
    if left:
        raise Violation(f"arrivals left over: {left}")


def check(label, expect_ok, trials, **kw):
    rng = random.Random(7)
    failures = 0
    first = None
    for t in range(trials):
        n_pairs = rng.choice([0, 1, 2, 3, 4, 5, 7, 12, 20])
        try:
            run(n_pairs, rng=rng, **kw)
        except Violation as e:
            failures += 1
            first = first or f"{n_pairs} pairs: {e}"
    ok = failures == 0
    print(f"{label}: {trials - failures} of {trials} interleavings clean" + ("" if ok else f"; first: {first}"))
    if ok != expect_ok:
        sys.exit(f"protocol model: {label} should {'pass' if expect_ok else 'fail'}")


if __name__ == "__main__":
    for d in (128, 64):
        check(f"variant 3, d {d}", True, 3000, d=d, NS=2, bufs=3, per_buffer_bars=True)
    check("wrong: 2 dS^T buffers", False, 3000, d=128, NS=2, bufs=2, per_buffer_bars=True)
    check("wrong: one barrier per consumer", False, 3000, d=128, NS=2, bufs=3, per_buffer_bars=False)
    print("protocol model: ok")
