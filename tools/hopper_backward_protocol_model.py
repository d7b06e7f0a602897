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
And the deterministic option's order across CTAs (deterministic_order): CTAs dispatched in blockIdx
order onto a few resident slots never deadlock, every dQ tile is summed by exactly the key blocks
floor(qbmin / 128) .. in increasing order, and walking query blocks from the last down waits less
than walking them up.
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


def interleavings(model, label, expect_ok, trials, trial):
    """Runs trial(rng) `trials` times (it returns a description of the case and raises Violation on a
    fault), prints how many were clean and exits unless that matches expect_ok. Shared with
    hopper_dq_pipeline_model.py."""
    rng = random.Random(7)
    failures = 0
    first = None
    for _ in range(trials):
        try:
            trial(rng)
        except Violation as e:
            failures += 1
            first = first or str(e)
    ok = failures == 0
    print(f"{label}: {trials - failures} of {trials} interleavings clean" + ("" if ok else f"; first: {first}"))
    if ok != expect_ok:
        sys.exit(f"{model}: {label} should {'pass' if expect_ok else 'fail'}")


def check(label, expect_ok, trials, **kw):
    def trial(rng):
        n_pairs = rng.choice([0, 1, 2, 3, 4, 5, 7, 12, 20])
        try:
            run(n_pairs, rng=rng, **kw)
        except Violation as e:
            raise Violation(f"{n_pairs} pairs: {e}")
    interleavings("protocol model", label, expect_ok, trials, trial)


def deterministic_order(S, group, lens, resident, descending, rng):
    """The deterministic dQ order across CTAs (one kv head): the CTAs of key blocks of 128 keys are
    dispatched in blockIdx order onto `resident` slots, each walks its (query head, 64-row block)
    pairs as backward_cta's walk does (DET: query blocks from the last down, heads inside) and, per
    pair, waits until the tile's counter equals kb - floor(qbmin / 128), adds, increments. A step of a
    CTA is one pair; CTAs step in random order. Returns the steps a CTA spent waiting, in all, or
    raises on a deadlock or a contribution out of key-block order."""
    doc = []
    start = 0
    for n in lens + [S - sum(lens)]:
        doc += [start] * n
        start += n
    nqb, nkb = (S + 63) // 64, (S + 127) // 128
    qbmin = [min(doc[64 * b: min(64 * b + 64, S)]) for b in range(nqb)]
    sufmin = [min(qbmin[b:]) for b in range(nqb)]
    def pairs(kb):
        k0, k_last = 128 * kb, min(128 * kb + 127, S - 1)
        qb_begin = k0 // 64
        end = qb_begin
        while end < nqb and sufmin[end] <= k_last:
            end += 1
        nq = max(end - qb_begin, 0)
        its = range(group * nq)
        out = []
        for it in its:
            if descending:
                h, qb = it % group, qb_begin + nq - 1 - it // group
            else:
                h, qb = it // nq, qb_begin + it % nq
            if qbmin[qb] <= k_last:
                out.append((h, qb))
        return out
    walks = [pairs(kb) for kb in range(nkb)]
    pos = [0] * nkb
    counter = {}
    added = {}  # tile -> key blocks in the order they added
    running, nxt, waited = [], 0, 0
    while nxt < nkb or running:
        while len(running) < resident and nxt < nkb:
            running.append(nxt)
            nxt += 1
        progress = [kb for kb in running if pos[kb] == len(walks[kb]) or
                    counter.get(walks[kb][pos[kb]], 0) == kb - qbmin[walks[kb][pos[kb]][1]] // 128]
        waited += len(running) - len(progress)
        if not progress:
            raise Violation(f"deterministic order deadlocks: CTAs {running} all wait")
        kb = rng.choice(progress)
        if pos[kb] == len(walks[kb]):
            running.remove(kb)
            continue
        tile = walks[kb][pos[kb]]
        counter[tile] = counter.get(tile, 0) + 1
        added.setdefault(tile, []).append(kb)
        pos[kb] += 1
    for tile, kbs in added.items():
        if kbs != sorted(kbs):
            raise Violation(f"tile {tile}: key blocks added in the order {kbs}")
        lo = qbmin[tile[1]] // 128
        if kbs != list(range(lo, lo + len(kbs))):
            raise Violation(f"tile {tile}: contributors {kbs} are not floor(qbmin / 128) onwards")
    return waited


if __name__ == "__main__":
    for d in (128, 64):
        check(f"variant 3, d {d}", True, 3000, d=d, NS=2, bufs=3, per_buffer_bars=True)
    check("wrong: 2 dS^T buffers", False, 3000, d=128, NS=2, bufs=2, per_buffer_bars=True)
    check("wrong: one barrier per consumer", False, 3000, d=128, NS=2, bufs=3, per_buffer_bars=False)
    rng = random.Random(3)
    waits = {True: 0, False: 0}
    for S, group, lens in [(1, 1, []), (300, 2, []), (1000, 4, [300, 1, 70]), (2048, 4, []), (3000, 2, [1500]),
                           (4097, 1, [1365, 1, 70])]:
        for resident in (1, 3, 8):
            for desc in (True, False):
                waits[desc] += deterministic_order(S, group, lens, resident, desc, rng)
    print(f"deterministic dQ order: no deadlock, every tile summed in key-block order (S up to 4097, packed "
          f"documents, 1-8 resident CTAs); CTA-steps spent waiting: {waits[True]} walking query blocks "
          f"down, {waits[False]} walking them up")
    if waits[True] >= waits[False]:
        sys.exit("protocol model: walking query blocks down should wait less")
    print("protocol model: ok")
