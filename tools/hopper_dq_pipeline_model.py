#!/usr/bin/env python3
"""A model of how the Hopper attention backward's dQ leaves a consumer (variants 2 and 6 of
src/backend/cuda/hopper_attention_backward.cu): each consumer warpgroup stores its dQ of a pair into
one of two shared-memory buffers, and one thread (thread 0) adds the buffer to dq_acc with TMA
reductions that read it asynchronously until a later `cp.async.bulk.wait_group.read`. Variant 2 does
store, barrier, reduce, wait at the end of a pair; variant 6 stores at the end of the pair and issues
the barrier, the reduction and the wait at the start of the next pair (after that pair's scores), so
the order against the dS^T barrier that both consumers meet in every pair changes.

Each consumer is two threads here: thread 0 (stores its part, issues the reductions and waits) and
one other thread (stores its part only); what must hold is that no thread stores into a buffer that
an earlier reduction still reads, and that no reduction is issued before every thread stored and
fenced. Reductions finish reading at random moments, in any order; `wait_group.read 1` blocks until
all but the newest issued have. Named barriers block until every participant arrived. Random interleavings
of the four threads (two consumers; d 64: consumer 1 has no dQ but meets the dS^T barrier), and a
deliberately wrong protocol (variant 6 without its wait, or with one buffer) must fail.
Variant 7 hands the reductions to a writer warp of the producer: a consumer stores its dQ and arrives
(without waiting) on a stored barrier that the writer syncs on; the writer issues the reductions,
waits until the previous pair's have read their buffers and arrives on a free barrier, which the
consumer syncs on before it stores into a buffer again (one sync per pair from the second, one after
the last pair: the arrivals and syncs pair up). Named-barrier arrivals do not block; a second arrival
of one thread before the barrier completes is a fault. The wrong forms (no sync on free, no wait for
the reads before the free arrival) must fail.
Variant 9 (consumers split by product) hands P^T from one consumer to the other through one shared
buffer (P_full / P_empty barriers) and keeps one dQ tile (run_split).
It models the protocol, not the CUDA source or the hardware.
  python3 tools/hopper_dq_pipeline_model.py      (a few seconds)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hopper_backward_protocol_model import Violation, interleavings  # noqa: E402


def thread_program(c, tid, n_pairs, writes_dq, order):
    """The dQ-related steps of thread `tid` (0 issues the reductions) of consumer c."""
    nbuf = 1 if order == "v6_one_buffer" else 2

    def issue(m):  # the barrier of the consumer, then thread 0's reduction of pair m and its wait
        yield ("bar", ("dq", c))
        if tid == 0 and m is not None:
            yield ("reduce", m, m % nbuf)
            if order != "v6_no_wait":
                yield ("wait_read", 1)

    for n in range(n_pairs):
        if order.startswith("v6") and writes_dq:
            yield from issue(n - 1 if n > 0 else None)
        yield ("bar", "ds")  # gradients(n): both consumers' dS^T written
        if writes_dq:
            yield ("store", n, n % nbuf)
            if order == "v2":
                yield from issue(n)
    if order.startswith("v6") and writes_dq and n_pairs > 0:
        yield from issue(n_pairs - 1)


def run(n_pairs, d, order, rng):
    writes = [True, d == 128]
    threads = [(c, t) for c in range(2) for t in range(2)]
    progs = {ct: thread_program(ct[0], ct[1], n_pairs, writes[ct[0]], order) for ct in threads}
    pending = {ct: next(progs[ct], None) for ct in threads}
    participants = {"ds": set(threads), ("dq", 0): {(0, 0), (0, 1)}, ("dq", 1): {(1, 0), (1, 1)}}
    arrived = {k: set() for k in participants}
    reading = {0: [], 1: []}         # per consumer: reductions (issue number, buf) still reading
    issued = {0: 0, 1: 0}            # per consumer: reductions issued so far
    stored = {0: {}, 1: {}}          # per consumer: pair -> threads that stored it
    while any(pending.values()):
        # Random completions of reductions' reads.
        for c in (0, 1):
            if reading[c] and rng.random() < 0.3:
                reading[c].pop(rng.randrange(len(reading[c])))
        runnable = []
        for ct, step in pending.items():
            if step is None:
                continue
            kind = step[0]
            if kind == "bar" and ct in arrived[step[1]]:
                continue  # arrived, waiting for the others
            # wait_group.read k: every reduction but the k newest issued has finished reading.
            if kind == "wait_read" and any(i < issued[ct[0]] - step[1] for i, _ in reading[ct[0]]):
                continue
            runnable.append(ct)
        # A barrier whose participants all arrived releases them.
        for key, who in participants.items():
            if arrived[key] == who:
                arrived[key] = set()
                for ct in who:
                    pending[ct] = next(progs[ct], None)
                runnable = None
                break
        if runnable is None:
            continue
        if not runnable:
            if any(reading[c] for c in (0, 1)):
                continue  # a read will finish
            raise Violation("deadlock: " + str({ct: s for ct, s in pending.items() if s}))
        ct = rng.choice(runnable)
        c, t = ct
        step = pending[ct]
        kind = step[0]
        if kind == "bar":
            arrived[step[1]].add(ct)
            continue
        if kind == "store":
            _, n, buf = step
            if any(b == buf for _, b in reading[c]):
                raise Violation(f"consumer {c} thread {t} stores pair {n} into buffer {buf} while a reduction reads it")
            stored[c].setdefault(n, set()).add(t)
        elif kind == "reduce":
            _, m, buf = step
            if stored[c].get(m) != {0, 1}:
                raise Violation(f"consumer {c} reduces pair {m} before every thread stored it")
            reading[c].append((issued[c], buf))
            issued[c] += 1
        pending[ct] = next(progs[ct], None)


def check(label, order, expect_ok, trials=1500, runner=None):
    """Random interleavings of `runner` (run, or run_writer for variant 7), d 128 and 64 alternately."""
    runner = runner or run
    count = iter(range(trials))

    def trial(rng):
        n_pairs, d = rng.randint(1, 7), 128 if next(count) % 2 == 0 else 64
        try:
            runner(n_pairs, d, order, rng)
        except Violation as e:
            raise Violation(f"{n_pairs} pairs, d {d}: {e}")
    interleavings("dq pipeline model", label, expect_ok, trials, trial)


def simulate(progs, parts, rng, extra=None):
    """Steps the threads' programs (generators of steps) in a random interleaving. Steps: ("sync" |
    "arrive", barrier key), named barriers whose participants are parts[key] (an arrival does not
    block; a second arrival before the barrier completes is a fault); ("store", consumer, pair, buf)
    into a dQ buffer (a fault while a reduction reads it); ("reduce", consumer, pair, buf), which
    needs threads 0 and 1 of the consumer to have stored the pair, and reads the buffer until a random
    later moment; ("wait_read", k): blocks until the reductions of every pair but the k newest issued
    have read. Other steps go to extra(thread, step). Raises Violation on a fault or a deadlock."""
    arrived = {k: set() for k in parts}
    blocked = {}  # thread -> barrier key it syncs on
    pending = {k: next(g, None) for k, g in progs.items()}
    reading = []  # (pair, consumer, buf) of reductions not yet done reading
    issued = 0    # pairs whose reductions were issued
    stored = {}   # (consumer, pair) -> threads that stored
    while any(v is not None for v in pending.values()):
        if reading and rng.random() < 0.3:
            reading.pop(rng.randrange(len(reading)))
        done = [key for key, who in parts.items() if arrived[key] == who]
        for key in done:  # a barrier all of whose participants arrived completes
            arrived[key] = set()
            for th in [th for th, k in blocked.items() if k == key]:
                del blocked[th]
                pending[th] = next(progs[th], None)
        if done:
            continue
        runnable = [th for th, step in pending.items() if step is not None and th not in blocked and
                    not (step[0] == "wait_read" and any(m < issued - step[1] for m, _, _ in reading))]
        if not runnable:
            if reading:
                continue  # a read will finish
            raise Violation("deadlock: " + str({th: st for th, st in pending.items() if st}))
        th = rng.choice(runnable)
        step = pending[th]
        kind = step[0]
        if kind in ("sync", "arrive"):
            if th in arrived[step[1]]:
                raise Violation(f"{th} arrives twice on {step[1]} before it completes")
            arrived[step[1]].add(th)
            if kind == "sync":
                blocked[th] = step[1]
                continue
        elif kind == "store":
            _, c, n, buf = step
            if any(cc == c and b == buf for _, cc, b in reading):
                raise Violation(f"consumer {c} stores pair {n} into buffer {buf} while a reduction reads it")
            stored.setdefault((c, n), set()).add(th[1])
        elif kind == "reduce":
            _, c, n, buf = step
            if stored.get((c, n)) != {0, 1}:
                raise Violation(f"consumer {c}'s pair {n} reduced before every thread stored it")
            reading.append((n, c, buf))
            issued = n + 1
        elif kind != "wait_read":
            extra(th, step)
        pending[th] = next(progs[th], None)


def run_writer(n_pairs, d, order, rng):
    """Variant 7: consumer threads (c, t) and the writer warp "w"."""
    writes = [True, d == 128]
    cons = [(c, t) for c in range(2) for t in range(2)]

    def consumer(c):
        for n in range(n_pairs):
            yield ("sync", "ds")
            if writes[c]:
                if n > 0 and order != "v7_no_free":
                    yield ("sync", ("free", c))
                yield ("store", c, n, n % 2)
                yield ("arrive", ("stored", c))
        if writes[c] and n_pairs > 0 and order != "v7_no_free":
            yield ("sync", ("free", c))

    def writer():
        for n in range(n_pairs):
            for c in range(2):
                if writes[c]:
                    yield ("sync", ("stored", c))
                    yield ("reduce", c, n, n % 2)
            if order != "v7_no_wait":
                yield ("wait_read", 1)
            for c in range(2):
                if writes[c]:
                    yield ("arrive", ("free", c))

    progs = {ct: consumer(ct[0]) for ct in cons}
    progs["w"] = writer()
    parts = {"ds": set(cons)}
    for c in range(2):
        who = {(c, 0), (c, 1), "w"}
        parts[("stored", c)] = who
        parts[("free", c)] = who
    simulate(progs, parts, rng)


def run_split(n_pairs, d, order, rng):
    """Variant 9: threads (0, t) of pw, which writes P^T of each pair into the one shared P buffer, and
    (1, t) of dw, which reads it, then stores its dQ of the pair into the one dQ tile that its thread
    0 reduces. pw: per pair, from the second, a sync on P_empty, then its part of P^T(n), an arrival on
    P_full; after the last pair a sync on P_empty. dw: per pair a sync on P_full, its read of P^T(n), an
    arrival on P_empty; thread 0 waits for the last reduction's reads (wait_read 0), dw's barrier, the
    dQ stores, dw's barrier, thread 0's reduction. Faults: a read of a part not yet holding P^T(n) or
    already overwritten, a dQ store into the tile a reduction reads, a reduction before every dw thread
    stored, a second arrival before a barrier completes, a deadlock. The wrong forms (pw without its
    sync on P_empty, dw without the wait for the reads) must fail."""
    pw = [(0, t) for t in range(2)]
    dw = [(1, t) for t in range(2)]

    def producer_of_p(t):
        for n in range(n_pairs):
            if n > 0 and order != "v9_no_empty":
                yield ("sync", "empty")
            yield ("write_p", t, n)
            yield ("arrive", "full")
        if n_pairs > 0 and order != "v9_no_empty":
            yield ("sync", "empty")

    def consumer_of_p(t):
        for n in range(n_pairs):
            yield ("sync", "full")
            yield ("read_p", n)
            yield ("arrive", "empty")
            if t == 0 and order != "v9_no_wait":
                yield ("wait_read", 0)
            yield ("sync", "dw")
            yield ("store", 1, n, 0)
            yield ("sync", "dw")
            if t == 0:
                yield ("reduce", 1, n, 0)

    progs = {th: producer_of_p(th[1]) for th in pw}
    progs.update({th: consumer_of_p(th[1]) for th in dw})
    parts = {"full": set(pw + dw), "empty": set(pw + dw), "dw": set(dw)}
    p_part = {0: None, 1: None}  # pw thread t's part of the P buffer: the pair it holds

    def p_step(th, step):
        if step[0] == "write_p":
            p_part[step[1]] = step[2]
        elif any(v != step[1] for v in p_part.values()):  # read_p
            raise Violation(f"dw thread {th[1]} reads P^T({step[1]}) while the buffer holds {p_part}")

    simulate(progs, parts, rng, p_step)


def main():
    check("variant 2 (store, barrier, reduce, wait at the end of a pair)", "v2", True)
    check("variant 6 (barrier, reduce, wait after the next pair's scores)", "v6", True)
    check("wrong: variant 6 without the wait for the reads", "v6_no_wait", False)
    check("wrong: variant 6 with one dQ buffer", "v6_one_buffer", False)
    check("variant 7 (the reductions by a writer warp, stored / free barriers)", "v7", True, runner=run_writer)
    check("wrong: variant 7 without the consumers' sync on free", "v7_no_free", False, runner=run_writer)
    check("wrong: variant 7 without the writer's wait for the reads", "v7_no_wait", False, runner=run_writer)
    check("variant 9 (P^T handed from pw to dw, one dQ tile)", "v9", True, runner=run_split)
    check("wrong: variant 9 without pw's sync on P_empty", "v9_no_empty", False, runner=run_split)
    check("wrong: variant 9 without dw's wait for the reads", "v9_no_wait", False, runner=run_split)
    print("dq pipeline model: ok")


if __name__ == "__main__":
    main()
